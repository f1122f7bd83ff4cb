package app

import (
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

// journal show says when a retried attempt's next attempt was due (the
// delay it asked for), and how long the attempt itself ran, so that the
// one is not read as the other.
func TestJournalShowPrintsTheRetryDelay(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC)
	rec := &record.TurnRecord{TaskID: "turn:x", Attempts: []record.Attempt{
		{N: 1, Worker: "w1", Start: t0, End: t0.Add(4 * time.Millisecond), Outcome: record.OutcomeRetrying,
			Error: "could not resolve the agent's Letta conversation", RetryIn: 2 * time.Second},
		{N: 2, Worker: "w1", Start: t0.Add(2 * time.Second), End: t0.Add(3 * time.Second), Outcome: record.OutcomeAnswered},
	}}
	var b strings.Builder
	writeRecord(&b, rec)
	out := b.String()
	for _, want := range []string{"attempt 1 on w1: retrying (ran 4ms), next attempt in 2s\n", "attempt 2 on w1: answered (ran 1s)\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("journal show lacks %q:\n%s", want, out)
		}
	}
}
