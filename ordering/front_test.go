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
