package continuation

import (
	"strings"
	"testing"
)

// A run's failure is told with each fact once: no type or stop reason repeated.
func TestFailureTextSaysEachFactOnce(t *testing.T) {
	for _, c := range []struct{ reason, stop, typ, msg, want string }{
		{"run failed: error", "error", "internal_error", "simulated error (internal_error)",
			"run failed: simulated error (internal_error)"},
		{"run failed: error", "error", "internal_error", "Something went wrong",
			"run failed: internal_error: Something went wrong"},
		{"run failed: llm_api_error", "llm_api_error", "llm_rate_limit", "slow down",
			"run failed: llm_rate_limit: slow down (stop reason llm_api_error)"},
		{"run failed: llm_api_error", "llm_api_error", "llm_api_error", "upstream said no",
			"run failed: llm_api_error: upstream said no"},
		{"run was cancelled", "cancelled", "", "cancelled by the user", "run was cancelled: cancelled by the user"},
		{"run failed: error", "error", "", "", "run failed: error"},
	} {
		got := failureText(c.reason, c.stop, c.typ, c.msg)
		if got != c.want {
			t.Errorf("failureText(%q, %q, %q, %q) = %q, want %q", c.reason, c.stop, c.typ, c.msg, got, c.want)
		}
		for _, w := range []string{c.typ, c.stop} {
			if w != "" && strings.Count(got, w) > 1 && !strings.Contains(c.msg, w+" ") {
				t.Errorf("%q repeats %q", got, w)
			}
		}
	}
}
