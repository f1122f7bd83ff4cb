package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/record"
)

// A message id reused with another text is refused (a client bug, as an idempotency key
// reused with other content is to a payment API): Client.Enqueue returns a
// *MessageIDConflictError naming both texts' hashes, /enqueue answers 409 (queue/httpapi's TestEnqueueHandlerMessageIDConflict); the same text
// again is the duplicate it always was.
func TestMessageIDReusedWithOtherText(t *testing.T) {
	srv := testredis.RequireReal(t)
	for _, ordered := range []bool{true, false} {
		q := "lettaq-unit-midconflict-" + time.Now().Format("150405.000000")
		ord := Ordering{Off: !ordered, Config: ordering.Config{Prefix: "lettaq-unit:" + q + ":ord:"}}
		c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: ord})
		if err != nil {
			t.Fatal(err)
		}
		insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
		t.Cleanup(func() { _ = insp.DeleteQueue(q, true); _ = insp.Close(); _ = c.Close() })
		ctx := context.Background()
		m := Message{AgentID: "agent", Text: "first text", Conversation: record.Conversation{Integration: "web", ChatID: "7"}, MessageID: "m-1"}
		first, err := c.Enqueue(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		again, err := c.Enqueue(ctx, m)
		if err != nil || !again.Duplicate || again.TaskID != first.TaskID {
			t.Fatalf("ordered=%v: the same message again: %+v, %v; want a duplicate of %s", ordered, again, err, first.TaskID)
		}
		other := m
		other.Text = "another text"
		res, err := c.Enqueue(ctx, other)
		var conflict *MessageIDConflictError
		if !errors.As(err, &conflict) {
			t.Fatalf("ordered=%v: the message id with another text: %+v, %v; want a *MessageIDConflictError", ordered, res, err)
		}
		if conflict.TaskID != first.TaskID || conflict.EnqueuedHash != contentHash(m) || conflict.NewHash != contentHash(other) ||
			conflict.EnqueuedHash == conflict.NewHash || !strings.Contains(err.Error(), conflict.EnqueuedHash) || !strings.Contains(err.Error(), conflict.NewHash) {
			t.Errorf("ordered=%v: %+v: %v; want both texts' hashes named", ordered, conflict, err)
		}
		if ordered {
			// A line the first task has left (with no done mark): the refused message's join
			// put the id back, and the refusal takes it out again.
			key := c.cfg.Ordering.Key(m)
			if err := c.seq.Remove(ctx, key, first.TaskID); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Enqueue(ctx, other); !errors.As(err, &conflict) {
				t.Fatalf("refused again: %v", err)
			}
			if pos, err := c.seq.Position(ctx, key, first.TaskID); err != nil || pos != -1 {
				t.Errorf("after the refusal the id is at %d (%v) in the line, want -1 (not in it)", pos, err)
			}
		}
	}
}
