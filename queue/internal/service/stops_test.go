package service

import (
	"context"
	"errors"
	"testing"
)

var errShutdown = errors.New("shutting down")

// Stop cancels the handlers' contexts registered with Stops, with its cause, and every one
// registered after it began; a handler that ended is forgotten.
func TestStopsCancelAtShutdown(t *testing.T) {
	var s Stops
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	a, doneA, _ := s.Add(parent)
	b, doneB, _ := s.Add(parent)
	doneB()
	if !errors.Is(context.Cause(b), context.Canceled) || s.registered() != 1 {
		t.Fatalf("an ended handler: cause %v, %d registered", context.Cause(b), s.registered())
	}
	if a.Err() != nil {
		t.Fatal("a running handler's context ended before shutdown")
	}
	s.Stop(errShutdown)
	if !errors.Is(context.Cause(a), errShutdown) {
		t.Fatalf("running handler's cause %v, want errShutdown", context.Cause(a))
	}
	c, doneC, _ := s.Add(parent)
	if !errors.Is(context.Cause(c), errShutdown) {
		t.Fatalf("a handler starting during shutdown: cause %v, want errShutdown", context.Cause(c))
	}
	doneA()
	doneC()
	if s.registered() != 0 {
		t.Fatalf("%d still registered", s.registered())
	}
	// Asynq's own cancellation still reaches the handler.
	var s2 Stops
	d, doneD, _ := s2.Add(parent)
	defer doneD()
	cancelParent()
	if d.Err() == nil {
		t.Fatal("the task's context ended but the handler's did not")
	}
}
