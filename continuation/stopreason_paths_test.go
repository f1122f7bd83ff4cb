package continuation_test

import (
	"strings"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// wireFailures are the failure stop reasons of WIRE.md's table.
var wireFailures = []string{"error", "llm_api_error", "invalid_llm_response", "invalid_tool_call", "no_tool_call",
	"max_tokens_exceeded", "context_window_overflow_in_system_prompt", "insufficient_credits"}

// A run that said "Let me check that for you.", called a tool, then ended
// with a failure stop reason is Failed naming the reason, never Completed
// with the partial text as its answer: on the stream, and on the follow's
// poll and resume paths after the stream was cut.
func TestFailureStopReasonIsNeverTheAnswer(t *testing.T) {
	script := func() *lettasim.Script {
		return &lettasim.Script{Steps: []lettasim.Step{
			{Kind: lettasim.Reasoning, Text: "I should look this up."},
			{Kind: lettasim.Assistant, Text: "Let me check that for you."},
			{Kind: lettasim.ToolCall, ToolName: "web_search"},
			{Kind: lettasim.ToolReturn},
			{Kind: lettasim.Assistant, Text: "never said"},
		}}
	}
	paths := []struct {
		name   string
		cut    int
		mutate func(*budget.Config)
	}{
		{"stream", 0, func(*budget.Config) {}},
		{"poll", 2, func(b *budget.Config) { b.Resume = false }},
		{"resume", 2, func(b *budget.Config) { b.Background, b.Resume = true, true }},
	}
	for _, p := range paths {
		for _, stop := range append(append([]string{}, wireFailures...), "cancelled") {
			t.Run(p.name+"/"+stop, func(t *testing.T) {
				e := newEnv(t, script(), p.mutate)
				e.sim.SetFault(e.agent, lettasim.Fault{EndWith: stop, EndAfter: 3, DisconnectAfter: p.cut})
				st := agentclient.NewStreamState()
				d := e.run(t, e.turn("weather?"), st, 1)
				if d.Outcome != continuation.Failed || d.StopReason != stop {
					t.Fatalf("outcome %v stop %q reason %q, answer %q: want failed with stop reason %s", d.Outcome, d.StopReason, d.Reason, st.Answer(), stop)
				}
				if stop != "cancelled" && !strings.Contains(d.Reason, stop) {
					t.Errorf("reason %q does not name the stop reason %s", d.Reason, stop)
				}
				if st.Answer() != "Let me check that for you." {
					t.Errorf("partial text %q not kept in the state", st.Answer())
				}
			})
		}
	}
}
