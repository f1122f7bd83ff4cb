package ordering_test

import (
	"context"
	"testing"

	"github.com/lettaq/lettaq/ordering"
)

// JoinFront puts a task before the waiting ones, keeps its place when
// joined again, and does not bring back a finished task.
func TestJoinFront(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		const key = "agent-1|web|chat-1"
		for _, id := range []string{"a", "b"} {
			if _, err := s.Join(ctx, key, id); err != nil {
				t.Fatal(err)
			}
		}
		if pos := must[int](t)(s.JoinFront(ctx, key, "answer")); pos != 0 {
			t.Fatalf("JoinFront position %d, want 0", pos)
		}
		if pos := must[int](t)(s.JoinFront(ctx, key, "answer")); pos != 0 {
			t.Fatalf("second JoinFront position %d, want 0", pos)
		}
		if pos := must[int](t)(s.Position(ctx, key, "a")); pos != 1 {
			t.Fatalf("a is at %d, want 1", pos)
		}
		l, err := s.Acquire(ctx, key, "answer", "w1", nil)
		if err != nil {
			t.Fatal(err)
		}
		next, err := l.Release(ctx, true)
		if err != nil || next != "a" {
			t.Fatalf("next after the answer %q (%v), want a", next, err)
		}
		if pos := must[int](t)(s.JoinFront(ctx, key, "answer")); pos != -1 {
			t.Fatalf("a finished task joined again at %d", pos)
		}
		if pos := must[int](t)(s.JoinFront(ctx, "agent-1|web|empty", "x")); pos != 0 {
			t.Fatalf("JoinFront on an empty line: %d", pos)
		}
	})
}

// The task that holds the lock takes it over again by its id (a takeover
// of its turn on another worker) also when an answer joined in front of
// it meanwhile: the answer waits for that turn, not for the dead holder's
// lease to run out.
func TestAcquireOwnLockBehindFront(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		const key = "agent-1|web|chat-own"
		if _, err := s.Join(ctx, key, "x"); err != nil {
			t.Fatal(err)
		}
		old, err := s.Acquire(ctx, key, "x", "dead", nil)
		if err != nil {
			t.Fatal(err)
		}
		if pos := must[int](t)(s.JoinFront(ctx, key, "answer")); pos != 0 {
			t.Fatalf("JoinFront position %d, want 0", pos)
		}
		if _, err := s.Acquire(ctx, key, "answer", "w1", nil); err == nil {
			t.Fatal("the answer took the lock that x holds")
		}
		l, err := s.Acquire(ctx, key, "x", "w2", nil)
		if err != nil {
			t.Fatalf("x's takeover cannot take its own lock back behind the answer: %v", err)
		}
		if l.Token() == old.Token() {
			t.Fatal("the takeover holds the lock under the dead holder's token")
		}
		next, err := l.Release(ctx, true)
		if err != nil || next != "answer" {
			t.Fatalf("next after x %q (%v), want answer", next, err)
		}
		if _, err := s.Acquire(ctx, key, "answer", "w1", nil); err != nil {
			t.Fatalf("the answer after x: %v", err)
		}
	})
}
