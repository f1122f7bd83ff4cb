package attempt

import (
	"context"
	"errors"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// docMappingRows reads the error mapping table of doc.go: each row's
// columns (a row's continuation lines, indented, are left out).
func docMappingRows(t *testing.T) [][]string {
	b, err := os.ReadFile("../../doc.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	i := strings.Index(text, "// # Error mapping\n")
	if i < 0 {
		t.Fatal("doc.go has no Error mapping section")
	}
	var rows [][]string
	cols := regexp.MustCompile(`\s{2,}`)
	for n, line := range strings.Split(text[i:], "\n")[2:] {
		if !strings.HasPrefix(line, "//\t") {
			break
		}
		if n == 0 || strings.HasPrefix(line, "//\t  ") {
			continue // the header, a row's continuation
		}
		rows = append(rows, cols.Split(strings.TrimPrefix(line, "//\t"), -1))
	}
	return rows
}

// columns renders e as the table's columns: the final event, the journal's
// outcome, what Asynq is told.
func (e ending) columns() (event, journal, asynqCol string) {
	switch e.Final {
	case "":
		event = "–"
	case record.EventError:
		event = "error, permanent"
	default:
		event = string(e.Final)
	}
	switch e.Asynq {
	case endDone:
		asynqCol = "nil"
	case endArchive:
		asynqCol = "SkipRetry"
	case endRetry:
		asynqCol = "retry after"
	case endInterrupted:
		asynqCol = "interrupted"
	case endPutBack:
		asynqCol = "put back"
	}
	return event, e.Outcome, asynqCol
}

// TestEndOfTable: every row of doc.go's error mapping table, from the
// continuation's decision to the final event, the journal's outcome and
// what Asynq is told: endOf's answer matches the row's columns. The rows
// decided before a decision exists name the code and test that cover them.
func TestEndOfTable(t *testing.T) {
	status := func(code int, retryAfter time.Duration) error {
		return &agentclient.Error{Op: "send message", StatusCode: code, RetryAfter: retryAfter}
	}
	base := endingInput{Retried: 0, MaxRetry: 26, StuckRetryDelay: 30 * time.Second}
	with := func(d continuation.Result) endingInput { in := base; in.D = d; return in }
	last := func(in endingInput) endingInput { in.Retried = in.MaxRetry - 1; return in }
	crashed := func(in endingInput) endingInput { in.Retried = in.MaxRetry; return in }
	cancelled := func(in endingInput) endingInput { in.Cancelled = true; return in }

	cases := map[string]struct {
		in    endingInput
		check func(t *testing.T, e ending)
	}{
		"Completed": {in: with(continuation.Result{Outcome: continuation.Completed, Sends: 1, StopReason: "end_turn"})},
		"Completed, stop requires_approval": {in: with(continuation.Result{Outcome: continuation.Completed, Sends: 1,
			StopReason: "requires_approval"})},
		"Failed (run failed or was cancelled)": {in: with(continuation.Result{Outcome: continuation.Failed, Sends: 1,
			RunID: "run-1", StopReason: "cancelled", Reason: "run cancelled"}),
			check: func(t *testing.T, e ending) {
				if e.Reason != "run cancelled" || e.StopReason != "cancelled" {
					t.Errorf("reason %q, stop %q", e.Reason, e.StopReason)
				}
			}},
		"Cancelled (Client.Cancel), run not done": {in: cancelled(with(continuation.Result{Outcome: continuation.Failed, Sends: 1,
			RunID: "run-1", StopReason: "cancelled", Reason: "run was cancelled"})),
			check: func(t *testing.T, e ending) {
				if e.StopReason != record.StopReasonCancelled {
					t.Errorf("stop %q", e.StopReason)
				}
				// A cancelled turn that was never sent (beforeSend refused,
				// a busy thread, a refusal) ends the same way: never retried.
				for _, d := range []continuation.Result{
					{Outcome: continuation.Failed, Retryable: true, Err: errors.New("cancelled before send")},
					{Outcome: continuation.Busy, Sends: 1}, {Outcome: continuation.NotAdmitted, Sends: 1},
					{Outcome: continuation.Refused, Sends: 1}, {Outcome: continuation.Rejected, Sends: 1},
				} {
					if e := endOf(cancelled(with(d))); e.Outcome != record.OutcomeCancelled || e.Asynq != endDone {
						t.Errorf("%v: %s, %v; want cancelled, done (the task completes)", d.Outcome, e.Outcome, e.Asynq)
					}
				}
				// Interrupted or out of budget: the next attempt carries the cancel out;
				// a failure of the run's own is a failure.
				for _, d := range []continuation.Result{
					{Outcome: continuation.Interrupted}, {Outcome: continuation.StillRunning, RunID: "run-1"},
					{Outcome: continuation.Failed, Sends: 1, RunID: "run-1", StopReason: "llm_api_error"},
				} {
					if e := endOf(cancelled(with(d))); e.Outcome == record.OutcomeCancelled {
						t.Errorf("%v (%s): cancelled, want the decision's own Ending", d.Outcome, d.StopReason)
					}
				}
			}},
		"Cancelled, the run completed first": {in: cancelled(with(continuation.Result{Outcome: continuation.Completed, Sends: 1,
			StopReason: "end_turn"}))},
		"Failed before anything was sent": {in: with(continuation.Result{Outcome: continuation.Failed,
			Err: errors.New("journal the intent: redis down"), Reason: "journal the intent"})},
		"Rejected (404 agent, 4xx)": {in: with(continuation.Result{Outcome: continuation.Rejected, Sends: 1,
			Err: status(http.StatusNotFound, 0), Reason: "agent not found"}),
			check: func(t *testing.T, e ending) {
				if !e.Refusal {
					t.Error("a 4xx after a send: the refusal is not journaled")
				}
			}},
		"Rejected, retryable (409 other)": {in: with(continuation.Result{Outcome: continuation.Rejected, Sends: 1,
			Retryable: true, Err: status(http.StatusConflict, 3*time.Second), Reason: "conflict"}),
			check: func(t *testing.T, e ending) {
				if e.Delay != 3*time.Second || !e.Refusal {
					t.Errorf("delay %v (want Retry-After 3s), refusal %v", e.Delay, e.Refusal)
				}
			}},
		"Rejected, 409 pending approval": {in: with(continuation.Result{Outcome: continuation.Rejected, Sends: 1,
			Err: status(http.StatusConflict, 0), Reason: "pending approval"})},
		"Busy (409 busy, another run)": {in: func() endingInput {
			in := with(continuation.Result{Outcome: continuation.Busy, Sends: 1, Err: status(http.StatusConflict, 0), Reason: "busy"})
			in.BusyInARow = 2
			return in
		}(), check: func(t *testing.T, e ending) {
			if want := busyRetry(0, 3); e.Delay != want {
				t.Errorf("put back for %v, want %v (the third busy in a row)", e.Delay, want)
			}
		}},
		"Refused (503 deploy, 429 API rate limit)": {in: with(continuation.Result{Outcome: continuation.Refused, Sends: 1,
			Err: status(http.StatusServiceUnavailable, time.Hour), Reason: "not admitted (the server said so)"}),
			check: func(t *testing.T, e ending) {
				if e.Delay != MaxServerRetryAfter || !e.Refusal || !strings.Contains(e.Reason, "more than the 1m0s cap") {
					t.Errorf("delay %v (want the cap for a Retry-After of 1h), refusal %v, reason %q", e.Delay, e.Refusal, e.Reason)
				}
			}},
		"Rejected, 429/402 account limit": {in: with(continuation.Result{Outcome: continuation.Rejected, Sends: 1,
			Err: status(http.StatusTooManyRequests, 0), Reason: "the Letta account is out of credits"}),
			check: func(t *testing.T, e ending) {
				if e.Reason != "the Letta account is out of credits" {
					t.Errorf("reason %q", e.Reason)
				}
			}},
		"NotAdmitted, model rate limit (BackOff)": {in: func() endingInput {
			in := with(continuation.Result{Outcome: continuation.NotAdmitted, Sends: 1, BackOff: true, Reason: "llm_rate_limit"})
			in.Retried = 2
			return in
		}(), check: func(t *testing.T, e ending) {
			if e.Delay != 8*time.Second {
				t.Errorf("delay %v, want 8s (2s doubled per retry made, 2 made)", e.Delay)
			}
		}},
		"StillRunning (budget spent, run alive)": {in: with(continuation.Result{Outcome: continuation.StillRunning, Sends: 1,
			RunID: "run-1", Reason: "budget spent"}),
			check: func(t *testing.T, e ending) {
				if e.Delay != 30*time.Second {
					t.Errorf("delay %v, want StuckRetryDelay", e.Delay)
				}
			}},
		"StillRunning, history or run unreadable": {in: func() endingInput {
			in := with(continuation.Result{Outcome: continuation.StillRunning, Sends: 1,
				Err: errors.New("connection refused"), Reason: "could not search the history"})
			in.Retried = 6
			return in
		}(), check: func(t *testing.T, e ending) {
			if e.Delay != time.Minute {
				t.Errorf("delay %v, want the backoff after 6 retries (1m, over StuckRetryDelay)", e.Delay)
			}
		}},
		"NotAdmitted, resend forbidden": {in: with(continuation.Result{Outcome: continuation.NotAdmitted, Sends: 1,
			Resend: continuation.ResendForbidden, Reason: "not admitted"})},
		"NotAdmitted after a resend": {in: with(continuation.Result{Outcome: continuation.NotAdmitted, Sends: 2,
			Resend: continuation.ResendSent, Reason: "not admitted"})},
		"Interrupted (shutdown, deadline)": {in: func() endingInput {
			in := with(continuation.Result{Outcome: continuation.Interrupted, Sends: 1, Reason: "stream"})
			in.Cause = context.DeadlineExceeded
			return in
		}(), check: func(t *testing.T, e ending) {
			if !errors.Is(e.Err, context.DeadlineExceeded) || e.Reason != "interrupted: stream: context deadline exceeded" {
				t.Errorf("err %v, reason %q", e.Err, e.Reason)
			}
		}},
		"any retry on the last allowed attempt": {in: last(with(continuation.Result{Outcome: continuation.NotAdmitted, Sends: 1,
			Reason: "not admitted"})),
			check: func(t *testing.T, e ending) {
				if !e.GaveUp {
					t.Error("not given up")
				}
			}},
		"a put-back with no retry left (a crash": {in: crashed(with(continuation.Result{Outcome: continuation.Busy, Sends: 1,
			Err: status(http.StatusConflict, 0), Reason: "busy"})),
			check: func(t *testing.T, e ending) {
				if !e.GaveUp || e.Reason != "the agent's thread was busy with another run: busy" {
					t.Errorf("gave up %v, reason %q", e.GaveUp, e.Reason)
				}
			}},
	}
	// Rows decided before the turn has a decision (not endOf's).
	elsewhere := map[string]string{
		"invalid payload":                         "the handler's DecodePayload (turn.go; integration TestBadPayloadsArchived)",
		"not its turn (ordering)":                 "turn.acquire (order.go; package ordering's put-back)",
		"cancelled while waiting (never sent)":    "Client.Cancel's dropWaiting, cancel.Turn.AtStart and turn.cancelWaiting (cancel.go, cancelturn.go; integration TestCancelWaitingTurn, TestCancelRecordEndsTheNextAttempt)",
		"merged into another turn (coalescing)":   "turn.coalesced (order.go; integration TestCoalescing)",
		"message, its chat's approval unanswered": "turn.approvalGate (approvalturn.go), with its (ApprovalPolicy error) line",
	}

	rows := docMappingRows(t)
	if len(rows) < len(cases) {
		t.Fatalf("doc.go's table has %d rows, fewer than the %d cases", len(rows), len(cases))
	}
	seen := map[string]bool{}
	for _, cols := range rows {
		name := cols[0]
		seen[name] = true
		if _, ok := elsewhere[name]; ok {
			continue
		}
		c, ok := cases[name]
		if !ok {
			t.Errorf("doc.go's row %q has no case here", name)
			continue
		}
		t.Run(name, func(t *testing.T) {
			if len(cols) < 4 {
				t.Fatalf("row %q: columns %q", name, cols)
			}
			e := endOf(c.in)
			event, journal, asynqCol := e.columns()
			if !strings.HasPrefix(cols[1], event) || cols[2] != journal || !strings.HasPrefix(cols[3], asynqCol) {
				t.Errorf("EndOf: %s | %s | %s; doc.go: %s | %s | %s", event, journal, asynqCol, cols[1], cols[2], cols[3])
			}
			if c.check != nil {
				c.check(t, e)
			}
		})
	}
	for name := range cases {
		if !seen[name] {
			t.Errorf("case %q is no row of doc.go's table", name)
		}
	}
	for name := range elsewhere {
		if !seen[name] {
			t.Errorf("%q is no row of doc.go's table", name)
		}
	}
}

// The chat's conversation not resolved because Letta did not answer within
// the resolution's own time limit (a proxy that holds connections) is a
// transient failure backed off like a refused connection, not an
// interruption retried in 100ms; only the attempt's own end interrupts it.
func TestThreadUnresolvedIsTransient(t *testing.T) {
	slow := &agentclient.Error{Op: "list conversations", Err: context.DeadlineExceeded}
	d := threadUnresolved(context.Background(), slow)
	if d.Outcome != continuation.Rejected || !d.Retryable {
		t.Fatalf("%v retryable=%v (%s): want Rejected, retryable", d.Outcome, d.Retryable, d.Reason)
	}
	if e := endOf(endingInput{D: d, Retried: 3, MaxRetry: 26}); e.Asynq != endRetry || e.Delay != 8*time.Second {
		t.Errorf("%v after %v, want a retry after the backoff (8s after 3 retries)", e.Asynq, e.Delay)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if d := threadUnresolved(ctx, slow); d.Outcome != continuation.Interrupted {
		t.Errorf("the attempt's context ended: %v, want Interrupted", d.Outcome)
	}
	refused := &agentclient.Error{Op: "list conversations", StatusCode: http.StatusNotFound}
	if d := threadUnresolved(context.Background(), refused); d.Outcome != continuation.Rejected || d.Retryable {
		t.Errorf("404: %v retryable=%v, want Rejected for good", d.Outcome, d.Retryable)
	}
}

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
	maxRetry := 26 // the task max retry of a turn with the default MaxRetry (queue.TaskMaxRetry(queue.DefaultMaxRetry))
	for name, d := range paths {
		t.Run(name, func(t *testing.T) {
			var total time.Duration
			var delays []time.Duration
			for retried := 0; ; retried++ {
				e := endOf(endingInput{D: d, Retried: retried, MaxRetry: maxRetry, StuckRetryDelay: time.Second})
				if e.GaveUp {
					break
				}
				if e.Asynq != endRetry {
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
	e := endOf(endingInput{D: continuation.Result{Outcome: continuation.StillRunning, Sends: 1, RunID: "run-1"},
		Retried: 10, MaxRetry: maxRetry, StuckRetryDelay: time.Second})
	if e.Delay != time.Second {
		t.Errorf("a run still alive: retry after %v, want StuckRetryDelay", e.Delay)
	}
}
