package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A run that said "Let me check that for you.", called a tool, then ended
// with max_tokens_exceeded fails the turn: one permanent error event naming
// the stop reason, never an answer; the text it had given is kept in the
// journal as the partial answer (cut).
func TestFailureStopReasonFailsTheTurnAndKeepsItsText(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("cut", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I should look this up."},
		{Kind: lettasim.Assistant, Text: "Let me check that for you."},
		{Kind: lettasim.ToolCall, ToolName: "web_search"},
		{Kind: lettasim.ToolReturn},
		{Kind: lettasim.Assistant, Text: "never said"},
	}})
	e.sim.SetFault(agent, lettasim.Fault{EndWith: "max_tokens_exceeded", EndAfter: 3})
	e.startWorker("w1")
	c := e.conv("cut")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "weather?", Conversation: c, MessageID: "m1"})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventError || !final.Permanent || final.StopReason != "max_tokens_exceeded" ||
		!strings.Contains(final.Text, "max_tokens_exceeded") {
		t.Fatalf("final %+v\n%s", final, summarize(evs))
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeFailed || rec.StopReason != "max_tokens_exceeded" || rec.PartialAnswer != "Let me check that for you." {
		t.Fatalf("journal outcome %q stop %q partial %q", rec.Outcome, rec.StopReason, rec.PartialAnswer)
	}
}
