package fence

import (
	"context"
	"errors"
	"testing"
)

func TestFenceEndsTheAttemptsContext(t *testing.T) {
	cause := errors.New("taken over")
	ctx, stop := context.WithCancelCause(context.Background())
	var r Runner
	r.OnFence(stop)
	if r.IsFenced() || r.IsGone() {
		t.Fatal("a new runner is fenced or gone")
	}
	r.Fence(cause)
	if !r.IsFenced() || !errors.Is(context.Cause(ctx), cause) {
		t.Fatalf("after Fence: fenced %v, context's cause %v", r.IsFenced(), context.Cause(ctx))
	}
}

func TestFencedLeavesTheContext(t *testing.T) {
	ctx, stop := context.WithCancelCause(context.Background())
	defer stop(nil)
	var r Runner
	r.OnFence(stop)
	r.Fenced()
	r.Gone()
	if !r.IsFenced() || !r.IsGone() || ctx.Err() != nil {
		t.Fatalf("fenced %v, gone %v, context %v; want true, true, live", r.IsFenced(), r.IsGone(), ctx.Err())
	}
	var none Runner
	none.Fence(errors.New("x")) // no context to end: no panic
	if !none.IsFenced() {
		t.Fatal("Fence without OnFence did not fence")
	}
}
