package ordering_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lettaq/lettaq/ordering"
)

// ReleaseCmdAfter releases only when the key it waits for exists (the
// final event's marker, written in the same pipeline before it): without
// it the release changes nothing, the task keeps the lock and its place,
// and Release later does the rest.
func TestReleaseCmdAfter(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("after")
		joinAll(t, s, key, "a", "b")
		la, err := s.Acquire(ctx, key, "a", "w1", nil)
		if err != nil {
			t.Fatal(err)
		}
		marker := "test:marker:" + key
		t.Cleanup(func() { b.rdb.Del(context.Background(), marker) })
		run := func() (string, error) {
			cmd, next := la.ReleaseCmdAfter(true, marker)
			c := cmd(ctx, false) // EVAL: on miniredis too, with no script loaded
			_ = b.rdb.Process(ctx, c)
			return next(c)
		}
		if head, err := run(); !errors.Is(err, ordering.ErrNotReleased) {
			t.Fatalf("release without the marker: head %q, %v; want ErrNotReleased", head, err)
		}
		if task, _ := must2(t)(s.Holder(ctx, key)); task != "a" {
			t.Errorf("after a release that did not happen, the lock is held by %q, want a", task)
		}
		if p := must[int](t)(s.Position(ctx, key, "a")); p != 0 {
			t.Errorf("after a release that did not happen, a is at %d, want 0", p)
		}
		if err := b.rdb.Set(ctx, marker, "1", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if head, err := run(); err != nil || head != "b" {
			t.Fatalf("release with the marker: head %q, %v; want b", head, err)
		}
		if p := must[int](t)(s.Position(ctx, key, "a")); p != -1 {
			t.Errorf("a still in line at %d", p)
		}
	})
}
