package queue

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/attempt"
)

// A transient failure backs off 1 s doubling per retry made, up to a
// minute, on every path a Letta outage takes (the chat's conversation not
// resolved, a send refused with a retryable status, the history unreadable,
// a send never made): the task's retries then ride out an outage of many
// minutes instead of being spent a second apart. The figure is the sum of
// the delays before the turn gives up, with the default MaxRetry (attempts
// that fail at once, a refused connection, add nothing to it).
func TestTransientRetriesBackOff(t *testing.T) {
	refused := &agentclient.Error{Op: "list conversations", Err: errors.New("connect: connection refused")}
	paths := map[string]continuation.Result{
		"thread unresolved": {Outcome: continuation.Rejected, Retryable: true, Err: refused,
			Reason: "could not resolve the agent's Letta conversation"},
		"409 with Retry-After 1s": {Outcome: continuation.Rejected, Retryable: true, Sends: 1,
			Err: &agentclient.Error{Op: "send message", StatusCode: http.StatusConflict, RetryAfter: time.Second}},
		"history unreadable": {Outcome: continuation.StillRunning, Sends: 1, Err: refused,
			Reason: "could not search the agent's history"},
		"not sent":     {Outcome: continuation.Failed, Retryable: true, Err: errors.New("journal: redis down")},
		"not admitted": {Outcome: continuation.NotAdmitted, Sends: 2, Resend: continuation.ResendSent},
	}
	maxRetry := TaskMaxRetry(DefaultMaxRetry)
	for name, d := range paths {
		t.Run(name, func(t *testing.T) {
			var total time.Duration
			var delays []time.Duration
			for retried := 0; ; retried++ {
				e := attempt.EndOf(attempt.EndingInput{D: d, Retried: retried, MaxRetry: maxRetry, StuckRetryDelay: time.Second})
				if e.GaveUp {
					break
				}
				if e.Asynq != attempt.EndRetry {
					t.Fatalf("retried %d: %v, want a retry", retried, e.Asynq)
				}
				if want := min(time.Second<<retried, time.Minute); e.Delay < want {
					t.Fatalf("retried %d: retry after %v, want at least %v (1s doubling, capped at 1m); delays so far %v",
						retried, e.Delay, want, delays)
				}
				delays = append(delays, e.Delay)
				total += e.Delay
			}
			t.Logf("%d retries, %v of waits before the turn gives up", len(delays), total)
			if total < 15*time.Minute {
				t.Errorf("the retries ride out %v of outage, want at least 15m", total)
			}
		})
	}
	// The run is alive (the follow's budget was spent, nothing failed):
	// followed again after StuckRetryDelay, no backoff.
	e := attempt.EndOf(attempt.EndingInput{D: continuation.Result{Outcome: continuation.StillRunning, Sends: 1, RunID: "run-1"},
		Retried: 10, MaxRetry: maxRetry, StuckRetryDelay: time.Second})
	if e.Delay != time.Second {
		t.Errorf("a run still alive: retry after %v, want StuckRetryDelay", e.Delay)
	}
}
