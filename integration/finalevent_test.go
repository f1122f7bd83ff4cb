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

// A final event that could not be written does not release its turn's place
// in the line: the attempt retries, the next message of the chat waits, and
// the answer arrives once the stream can be written again (the
// release used to go in the same round trip as the final event, each on its
// own, so the line let go of a turn whose answer was not written; the retry
// then found its turn done, and the answer was lost). A's stream key is made a
// string (WRONGTYPE) while A thinks, and set right once A's attempt failed to
// deliver.
func TestFailedFinalEventKeepsTheLine(t *testing.T) {
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("finalfail", nil)
	conv := e.conv("finalfail")
	msg := func(mark string, think time.Duration) queue.Message {
		return queue.Message{AgentID: agent, Conversation: conv, MessageID: mark,
			Text: fmt.Sprintf("[[sim think=%s answer=answer-%s]] %s", simDur(think), mark, mark)}
	}
	a := e.enqueue(msg("A", 1500*time.Millisecond))
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	if _, err := e.sim.WaitOtid(wctx, a.Otid); err != nil {
		t.Fatalf("A never reached the agent: %v", err)
	}
	cancel()
	b := e.enqueue(msg("B", 100*time.Millisecond))
	ctx := context.Background()
	stream := e.replies.Key(conv)
	if err := e.rdb.Del(ctx, stream).Err(); err != nil {
		t.Fatal(err)
	}
	if err := e.rdb.Set(ctx, stream, "not a stream", time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	// Wait for A's attempt to fail its delivery (Asynq has its error), then
	// let the stream be.
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := e.insp.GetTaskInfo(e.queue, a.TaskID)
		if err == nil && strings.Contains(info.LastErr, "WRONGTYPE") {
			t.Logf("A's attempt failed: %s", info.LastErr)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("A's attempt never failed its delivery (task %+v, %v)", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := e.rdb.Del(ctx, stream).Err(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mark string
		res  queue.EnqueueResult
	}{{"A", a}, {"B", b}} {
		final, evs := e.waitFinal(conv, tc.res.TaskID, 30*time.Second)
		if final.Type != record.EventAnswer || final.Text != "answer-"+tc.mark {
			t.Errorf("%s: final %s %q; events %s", tc.mark, final.Type, final.Text, summarize(evs))
		}
	}
	e.settled()
	all := e.events(conv, "")
	for _, tc := range []queue.EnqueueResult{a, b} {
		if n := countFinal(e.events(conv, tc.TaskID)); n != 1 {
			t.Errorf("task %s: %d final events; stream %s", tc.TaskID, n, summarize(all))
		}
		if n := e.sim.CountOtid(tc.Otid); n != 1 {
			t.Errorf("task %s: otid stored %d times at the agent", tc.TaskID, n)
		}
		if rec := e.record(tc.TaskID); rec.Outcome != record.OutcomeAnswered {
			t.Errorf("journal of %s: outcome %q; %s", tc.TaskID, rec.Outcome, describeAttempts(rec))
		}
	}
	checkOrder(t, e.sim, agent, []string{"A", "B"})
	checkSerialRuns(t, e.sim, agent, 2)
}
