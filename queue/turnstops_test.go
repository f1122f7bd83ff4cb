package queue

import (
	"context"
	"errors"
	"testing"
)

// Shutdown cancels the handlers' contexts registered with turnStops, with
// errShutdown as the cause, and every one registered after it began; a
// handler that ended is forgotten.
func TestTurnStopsCancelAtShutdown(t *testing.T) {
	var s turnStops
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	a, doneA := s.add(parent)
	b, doneB := s.add(parent)
	doneB()
	if !errors.Is(context.Cause(b), context.Canceled) || len(s.m) != 1 {
		t.Fatalf("an ended handler: cause %v, %d registered", context.Cause(b), len(s.m))
	}
	if a.Err() != nil {
		t.Fatal("a running handler's context ended before shutdown")
	}
	s.stop()
	if !errors.Is(context.Cause(a), errShutdown) {
		t.Fatalf("running handler's cause %v, want errShutdown", context.Cause(a))
	}
	c, doneC := s.add(parent)
	if !errors.Is(context.Cause(c), errShutdown) {
		t.Fatalf("a handler starting during shutdown: cause %v, want errShutdown", context.Cause(c))
	}
	doneA()
	doneC()
	if len(s.m) != 0 {
		t.Fatalf("%d still registered", len(s.m))
	}
	// Asynq's own cancellation still reaches the handler.
	var s2 turnStops
	d, doneD := s2.add(parent)
	defer doneD()
	cancelParent()
	if d.Err() == nil {
		t.Fatal("the task's context ended but the handler's did not")
	}
}
