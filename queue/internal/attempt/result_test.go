package attempt

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue/record"
)

func TestTurnResultSummary(t *testing.T) {
	long := strings.Repeat("word ", 60)
	for _, c := range []struct {
		r    TurnResult
		want string
	}{
		{TurnResult{Outcome: record.OutcomeAnswered, LatencyMS: 1432, Attempts: 1, Answer: "you said:\n\n  hi"}, "answered in 1.4s: you said: hi"},
		{TurnResult{Outcome: record.OutcomeAnswered, LatencyMS: 61000, Attempts: 3, Answer: "ok", Merged: []string{"a", "b"}},
			"answered in 1m1s (3 attempts): ok (also answers 2 merged message(s))"},
		{TurnResult{Outcome: record.OutcomeApprovalRequired, Attempts: 1, Approval: &record.ToolEvent{Name: "send_email"}},
			"approval_required: waiting for approval of tool send_email"},
		{TurnResult{Outcome: record.OutcomeCoalesced, LatencyMS: 50, AnsweredBy: "turn:web:1:2"}, "coalesced in 100ms: merged into turn turn:web:1:2"},
		{TurnResult{Outcome: record.OutcomeAnswered, Answer: long}, "answered: " + strings.TrimSpace(long)[:120] + "…"},
	} {
		if got := c.r.summary(); got != c.want {
			t.Errorf("summary of %+v:\n got %q\nwant %q", c.r, got, c.want)
		}
	}
}

// TestTurnResultJSONMatches: a turn's result, encoded by hand, is the bytes json.Marshal makes.
func TestTurnResultJSONMatches(t *testing.T) {
	for _, r := range []TurnResult{
		{},
		{Summary: "answered in 1.4s: hi", TaskID: "turn:web:1", Otid: "o", RunID: "run-1", Outcome: record.OutcomeAnswered,
			Answer: "hi <b>&\u2028\xff", StopReason: "end_turn", Usage: &record.Usage{PromptTokens: 10, TotalTokens: 12}, Attempts: 2,
			QueueWaitMS: 3, TTFTMS: 40, LatencyMS: 50, AttemptMS: 45},
		{Outcome: record.OutcomeApprovalRequired, Approval: &record.ToolEvent{Name: "send_email", CallID: "c1", Arguments: `{"to":"x"}`, Status: "call"},
			Usage: &record.Usage{}, Merged: []string{"a", "b\""}, AnsweredBy: "turn:2", QueueWaitMS: -1, LatencyMS: -2},
		{Approval: &record.ToolEvent{Truncated: true, Return: "r"}, Merged: []string{}},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTurnResultJSON(nil, &r); string(got) != string(want) {
			t.Errorf("%+v:\n got %s\nwant %s", r, got, want)
		}
	}
}

// FuzzTurnResultJSONMatches: appendTurnResultJSON against json.Marshal on results made of the
// fuzzer's strings and numbers.
func FuzzTurnResultJSONMatches(f *testing.F) {
	f.Add("answered", "hello <world> & \u2028", "\xff\x00\"", int64(1500), uint16(0xffff))
	f.Add("", "", "", int64(0), uint16(0))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, n int64, flags uint16) {
		bit := func(i uint) bool { return flags&(1<<i) != 0 }
		pick := func(i uint, s string) string {
			if bit(i) {
				return s
			}
			return ""
		}
		r := TurnResult{Summary: s1, TaskID: s2, Otid: s3, RunID: pick(0, s1), Outcome: s2, Answer: s3 + s1,
			StopReason: pick(1, s2), Attempts: int(n), AnsweredBy: pick(2, s3), QueueWaitMS: n, TTFTMS: n * int64(flags&8),
			LatencyMS: -n, AttemptMS: n / 3}
		if bit(4) {
			r.Approval = &record.ToolEvent{Name: pick(5, s1), CallID: pick(6, s2), Arguments: pick(7, s3), Status: pick(8, s1),
				Return: pick(9, s2), Truncated: bit(10)}
		}
		if bit(11) {
			r.Usage = &record.Usage{PromptTokens: int(n), CompletionTokens: int(flags), TotalTokens: pickInt(bit(12), int(n)), StepCount: 1}
		}
		if bit(13) {
			r.Merged = []string{s1, s3}
		}
		if bit(14) {
			r.Merged = []string{}
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := appendTurnResultJSON(nil, &r); string(got) != string(want) {
			t.Fatalf("%+v:\n got %s\nwant %s", r, got, want)
		}
	})
}

func pickInt(ok bool, n int) int {
	if ok {
		return n
	}
	return 0
}
