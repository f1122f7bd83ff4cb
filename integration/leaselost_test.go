package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestLeaseLostMidTurn: a thinking turn whose conversation lock is taken
// over stops at the next renewal (its work context ends with the lease,
// which the turn holds no context of its own for while it waits), says
// why, and the turn is still answered once.
func TestLeaseLostMidTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("integration")
	}
	e := newEnv(t)
	const lease = 600 * time.Millisecond
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Ordering.Config.Lease = lease })
	c := e.conv("lease")
	m := queue.Message{AgentID: e.sim.CreateAgent("lease", nil), Conversation: c, MessageID: "m1",
		Text: fmt.Sprintf("[[sim think=%s answer=after]] think", simDur(4*time.Second))}
	res := e.enqueue(m)
	e.waitAttempt(res.TaskID, 1, "streaming")

	ctx := context.Background()
	lock := e.prefix + "ord:lock:{" + e.ordering().Key(m) + "}"
	if n, err := e.rdb.Exists(ctx, lock).Result(); err != nil || n != 1 {
		t.Fatalf("lock %s: exists %d, %v", lock, n, err)
	}
	e.rdb.HSet(ctx, lock, "token", "someone-else")
	stolen := time.Now()
	for {
		rec, err := e.journal.Get(ctx, res.TaskID)
		if err == nil && len(rec.Attempts) > 0 && !rec.Attempts[0].End.IsZero() {
			a := rec.Attempts[0]
			if !strings.Contains(a.Error, "lease lost") {
				t.Errorf("the first attempt ended with %q (%s), want the lease's loss named", a.Error, a.Outcome)
			}
			break
		}
		// The next renewal (every lease/3) finds the loss; the agent
		// would answer after 4 s.
		if time.Since(stolen) > 2*time.Second {
			t.Fatalf("the first attempt did not end within 2s of the lease's loss")
		}
		time.Sleep(10 * time.Millisecond)
	}
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer || countFinal(evs) != 1 {
		t.Fatalf("final %s, %d final events: %s", final.Type, countFinal(evs), summarize(evs))
	}
}
