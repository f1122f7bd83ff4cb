package continuation

import (
	"strings"
	"testing"
)

// Every stop reason of WIRE.md's table maps to its outcome through one
// function, row by row; a stop reason this version does not know is never an
// answer, whatever text came before it.
func TestStopReasonTable(t *testing.T) {
	for _, c := range []struct {
		stop      string
		want      Outcome
		retryable bool
	}{
		{"end_turn", Completed, false},
		{"max_steps", Completed, false},
		{"tool_rule", Completed, false},
		{"requires_approval", Completed, false},
		{"error", Failed, true},
		{"llm_api_error", Failed, true},
		{"invalid_llm_response", Failed, true},
		{"invalid_tool_call", Failed, false},
		{"no_tool_call", Failed, true},
		{"max_tokens_exceeded", Failed, false},
		{"context_window_overflow_in_system_prompt", Failed, false},
		{"insufficient_credits", Failed, false},
		{"cancelled", Failed, false},
		{"", Failed, true},
		{"some_future_reason", Failed, false},
	} {
		got, retryable, reason := judgeStop(c.stop)
		if got != c.want || retryable != c.retryable {
			t.Errorf("judgeStop(%q) = %v retryable=%v (%q), want %v retryable=%v", c.stop, got, retryable, reason, c.want, c.retryable)
		}
		if c.stop != "" && c.stop != "end_turn" && !strings.Contains(reason, c.stop) && c.stop != "cancelled" {
			t.Errorf("judgeStop(%q): reason %q does not name the stop reason", c.stop, reason)
		}
	}
}
