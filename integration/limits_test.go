package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
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
	if final.Type != queue.EventAnswer || final.Text != answer {
		t.Fatalf("final %s with %d bytes, want the whole %d-byte answer", final.Type, len(final.Text), len(answer))
	}
	e.settled()
	deltas := 0
	for _, ev := range e.events(c, res.TaskID) {
		if ev.Type == queue.EventAnswerDelta {
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
