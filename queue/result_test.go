package queue

import (
	"strings"
	"testing"
)

func TestTurnResultSummary(t *testing.T) {
	long := strings.Repeat("word ", 60)
	for _, c := range []struct {
		r    TurnResult
		want string
	}{
		{TurnResult{Outcome: OutcomeAnswered, LatencyMS: 1432, Attempts: 1, Answer: "you said:\n\n  hi"}, "answered in 1.4s: you said: hi"},
		{TurnResult{Outcome: OutcomeAnswered, LatencyMS: 61000, Attempts: 3, Answer: "ok", Merged: []string{"a", "b"}},
			"answered in 1m1s (3 attempts): ok (also answers 2 merged message(s))"},
		{TurnResult{Outcome: OutcomeApprovalRequired, Attempts: 1, Approval: &ToolEvent{Name: "send_email"}},
			"approval_required: waiting for approval of tool send_email"},
		{TurnResult{Outcome: OutcomeCoalesced, LatencyMS: 50, AnsweredBy: "turn:web:1:2"}, "coalesced in 100ms: merged into turn turn:web:1:2"},
		{TurnResult{Outcome: OutcomeAnswered, Answer: long}, "answered: " + strings.TrimSpace(long)[:120] + "…"},
	} {
		if got := c.r.summary(); got != c.want {
			t.Errorf("summary of %+v:\n got %q\nwant %q", c.r, got, c.want)
		}
	}
}
