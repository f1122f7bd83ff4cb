package integration

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestReplyStreamBound: one turn writes at most MaxReplyBytes of progress
// text to its reply stream; past it the deltas are dropped (journal
// warning), and the final answer still carries the whole answer.
func TestReplyStreamBound(t *testing.T) {
	e := newEnv(t)
	answer := strings.Repeat(strings.Repeat("word ", 199)+"word\n", 40) // 40 KiB of lines, streamed as 8 deltas
	agent := e.sim.CreateAgent("big", &lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: answer},
	}})
	const limit = 8 << 10
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.MaxReplyBytes = limit })
	c := e.conv("big")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "talk", Conversation: c, MessageID: "m1"})
	final, _ := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || final.Text != answer {
		t.Fatalf("final %s with %d bytes, want the whole %d-byte answer", final.Type, len(final.Text), len(answer))
	}
	e.settled()
	deltas := 0
	for _, ev := range e.events(c, res.TaskID) {
		if ev.Type == record.EventAnswerDelta {
			deltas += len(ev.Text)
		}
	}
	if deltas == 0 || deltas > limit {
		t.Fatalf("answer deltas carried %d bytes, want 1..%d", deltas, limit)
	}
	rec := e.record(res.TaskID)
	found := false
	for _, w := range rec.Warnings {
		found = found || strings.Contains(w, "LETTAQ_MAX_REPLY_BYTES")
	}
	if !found {
		t.Errorf("journal warnings %q do not name LETTAQ_MAX_REPLY_BYTES", rec.Warnings)
	}
	t.Logf("answer %d bytes; deltas written %d bytes (limit %d)", len(answer), deltas, limit)
}

// TestOverlongLineFailsTheTurnOnce: a Letta that answers with a line over
// the 8 MiB line limit gets the message once; the turn ends with one
// permanent error event and a journal error that name the violation, and
// the task is archived — no lookup, no resend.
func TestOverlongLineFailsTheTurnOnce(t *testing.T) {
	// A stall clock long enough that a loaded machine writing 9 MiB under
	// -race never fires it: this test is about the line, not the clock.
	e := newEnv(t, withBudget(func(b *budget.Config) { b.StallTimeout = 3 * time.Second }))
	var sends, others atomic.Int32
	chunk := []byte(strings.Repeat("x", 1<<20))
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages/stream") {
			sends.Add(1)
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: "))
			for i := 0; i < 9; i++ { // 9 MiB, generated as it goes
				if _, err := w.Write(chunk); err != nil {
					return
				}
			}
			_, _ = w.Write([]byte("\n\n"))
			return
		}
		others.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte("[]"))
	}))
	defer fake.Close()
	lc, err := agentclient.New(agentclient.Config{BaseURL: fake.URL, RequestTimeout: e.budget.RequestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Letta.Client = lc })
	c := e.conv("overlong")
	res := e.enqueue(queue.Message{AgentID: "agent-x", Text: "hi", Conversation: c, MessageID: "m1"})
	final, _ := e.waitFinal(c, res.TaskID, 20*time.Second)
	e.settled()
	if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "line too long") ||
		!strings.Contains(final.Text, "limit 8388608 bytes") {
		t.Fatalf("final %s permanent=%v: %q", final.Type, final.Permanent, final.Text)
	}
	if n := sends.Load(); n != 1 {
		t.Fatalf("the message was sent %d times", n)
	}
	if n := others.Load(); n != 0 {
		t.Errorf("%d lookups or polls after the violation", n)
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeFailed || !strings.Contains(rec.Error, "line too long") {
		t.Fatalf("journal %q: %q", rec.Outcome, rec.Error)
	}
	info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
	if err != nil || info.State != asynq.TaskStateArchived || !strings.Contains(info.LastErr, "line too long") {
		t.Fatalf("task %+v: %v", info, err)
	}
	t.Logf("error event: %s", final.Text)
}
