package attempt

import (
	"context"
	"errors"
	"time"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// endAction is what the handler tells Asynq when an attempt ends.
type endAction int

const (
	// endDone: nil, the task completes (its result written).
	endDone endAction = iota
	// endArchive: a permanent error (SkipRetry): Asynq archives the task.
	endArchive
	// endRetry: *retryAfterError after ending.Delay (at least retryBackoff).
	endRetry
	// endInterrupted: *interruptedError, retried at once.
	endInterrupted
	// endPutBack: *busyError: put back without using a retry.
	endPutBack
)

var endActionNames = [...]string{"done", "archive", "retry", "interrupted", "put back"}

func (a endAction) String() string { return endActionNames[a] }

// endingInput is what decides how an attempt ends (endOf): the
// continuation's decision and the facts of the attempt it needs.
type endingInput struct {
	D continuation.Result
	// RunID is the run the stream named ("" none).
	RunID string
	// Retried and MaxRetry are the task's retries used and allowed
	// (Asynq's; see completer.noRetryLeft).
	Retried, MaxRetry int
	// BusyInARow counts the attempts before this one that ended busy, one
	// after the other.
	BusyInARow int
	// Cause is what interrupted an Interrupted attempt (the lease's loss,
	// the shutdown; nil: the decision's error).
	Cause error
	// StuckRetryDelay is WorkerConfig.Timing.StuckRetryDelay.
	StuckRetryDelay time.Duration
	// Cancelled: the turn's cancel was asked for (Client.Cancel) before
	// its run was decided.
	Cancelled bool
}

// ending is how an attempt ends, decided by endOf before anything is
// written: the final event (none while the turn goes on), the journal's
// outcome, and what Asynq is told. The attempt's completer applies it (completer.ran).
type ending struct {
	// Final is the final event's type: record.EventAnswer, record.EventApprovalRequired,
	// record.EventError (permanent), or "" for none.
	Final record.EventType
	// Outcome is the journal's outcome of the attempt (of the turn when
	// Final is set).
	Outcome string
	Asynq   endAction
	// Delay is the retry's delay (endRetry: never less than retryBackoff)
	// or the put-back's (endPutBack). The attempt journals it.
	Delay time.Duration
	// Reason is why (the error event's text when Final is record.EventError).
	Reason string
	// StopReason is the run's stop reason the final event carries.
	StopReason string
	// GaveUp: the attempt would have been retried but has no retry left:
	// it ends the turn with a permanent error ("gave up after N attempts").
	GaveUp bool
	// Refusal: the server refused the send before storing anything (a 4xx,
	// or continuation.Refused): the journal withdraws the attempt's intent.
	Refusal bool
	// Err is the error a retry or a put-back carries (the decision's, or
	// the interruption's cause).
	Err error
}

// endOf maps a continuation decision to how the attempt ends: the error
// mapping table of the package documentation (doc.go), row by row
// (TestEndOfTable). It writes nothing.
func endOf(in endingInput) ending {
	d := in.D
	if in.Cancelled && cancelEnds(d) {
		// A cancel is a normal ending: the task completes with the cancelled result (not
		// archived, which counts as a failure in Asynq's metrics and asynqmon).
		return ending{Final: record.EventError, Outcome: record.OutcomeCancelled, Asynq: endDone, StopReason: record.StopReasonCancelled,
			Reason: "cancelled"}
	}
	switch d.Outcome {
	case continuation.Completed:
		if d.StopReason == "requires_approval" {
			return ending{Final: record.EventApprovalRequired, Outcome: record.OutcomeApprovalRequired, Asynq: endDone, StopReason: d.StopReason}
		}
		return ending{Final: record.EventAnswer, Outcome: record.OutcomeAnswered, Asynq: endDone, StopReason: d.StopReason}

	case continuation.Failed:
		if d.Sends == 0 && d.RunID == "" && in.RunID == "" && d.Err != nil && !agentclient.IsProtocolError(d.Err) {
			// Nothing was sent (the intent could not be journaled): retry.
			return endRetryOf(in, 0, d.Reason)
		}
		return endFail(d.Reason, d.StopReason)

	case continuation.Rejected:
		var e ending
		if d.Retryable {
			// A 409 with Retry-After, the chat's conversation not resolved
			// (Letta unreachable): the server's delay or the backoff,
			// whichever is longer.
			e = endRetryOf(in, agentclient.RetryAfter(d.Err), d.Reason)
		} else {
			e = endFail(d.Reason, "")
		}
		// Refused before anything was stored: the next attempt need not
		// look for the otid, and may send under any resend policy.
		st := agentclient.StatusCode(d.Err)
		e.Refusal = st >= 400 && st < 500 && d.Sends > 0
		return e

	case continuation.StillRunning:
		if d.Err == nil {
			// The run is alive (the follow's budget is spent) or its
			// message names no run yet: nothing failed, so the next
			// attempt follows it again soon, without backing off.
			return endRetryAt(in, in.StuckRetryDelay, d.Reason)
		}
		// The history or the run could not be read (Letta unreachable):
		// a transient failure, backed off.
		return endRetryOf(in, in.StuckRetryDelay, d.Reason)

	case continuation.NotAdmitted:
		if d.Resend == continuation.ResendForbidden {
			return endFail("message not admitted and policy forbids resend: "+d.Reason, "")
		}
		if d.BackOff {
			// The model is rate limited: not sent again at once.
			return endRetryOf(in, backoffDelay(in.Retried), d.Reason)
		}
		return endRetryOf(in, 0, d.Reason)

	case continuation.Refused:
		// The server refused the send saying it stored nothing (a deploy's
		// 503, Letta's API rate limit): the intent is withdrawn, and the next
		// attempt sends after the server's Retry-After (capped), same otid.
		delay, note := refusalWait(agentclient.RetryAfter(d.Err))
		if delay == 0 {
			delay = backoffDelay(in.Retried)
		}
		reason := d.Reason
		if note != "" {
			reason += "; " + note
		}
		e := endRetryOf(in, delay, reason)
		e.Refusal = true
		return e

	case continuation.Busy:
		reason := "the agent's thread was busy with another run: " + d.Reason
		if outOfRetries(&busyError{}, in.Retried, in.MaxRetry) {
			e := endFail(reason, "")
			e.GaveUp = true
			return e
		}
		return ending{Outcome: record.OutcomeBusy, Asynq: endPutBack, Reason: d.Reason, Err: d.Err,
			Delay: busyRetry(agentclient.RetryAfter(d.Err), in.BusyInARow+1), Refusal: true}

	case continuation.Interrupted:
		cause := in.Cause
		if cause == nil {
			cause = d.Err
		}
		if cause == nil {
			cause = context.Canceled
		}
		return endRetryAt(in, -1, "interrupted: "+d.Reason+": "+cause.Error())
	}
	return endRetryOf(in, 0, "unexpected outcome "+d.Outcome.String()+": "+d.Reason)
}

// FinalOutcome reports whether o ends the turn with its final event.
func FinalOutcome(o string) bool {
	return o == record.OutcomeAnswered || o == record.OutcomeFailed || o == record.OutcomeApprovalRequired || o == record.OutcomeCancelled
}

// cancelEnds reports whether a cancelled turn's decision d ends it
// cancelled: a run Letta completed first is answered; an attempt
// interrupted (or whose budget ran out while the run went on) leaves the
// cancel to the next attempt, which reads the record at its start; a run
// that failed for a reason of its own fails. Anything else (the run
// cancelled, a send refused or never made) ends it cancelled.
func cancelEnds(d continuation.Result) bool {
	switch d.Outcome {
	case continuation.Completed, continuation.Interrupted, continuation.StillRunning:
		return false
	case continuation.Failed:
		return d.StopReason == "" || d.StopReason == record.StopReasonCancelled
	}
	return true
}

// endFail ends the turn with a permanent error.
func endFail(reason, stop string) ending {
	return ending{Final: record.EventError, Outcome: record.OutcomeFailed, Asynq: endArchive, Reason: reason, StopReason: stop}
}

// endRetryOf leaves the turn to the next attempt after a transient
// failure: after delay (what the server asked for, or the path's own), but
// never sooner than retryBackoff; or gives up when the attempt has no retry
// left.
func endRetryOf(in endingInput, delay time.Duration, reason string) ending {
	return endRetryAt(in, max(delay, retryBackoff(in.Retried)), reason)
}

// endRetryAt is endRetryOf with delay as it is (delay < 0: an
// interruption): for the attempts that end without a failure to back off
// from.
func endRetryAt(in endingInput, delay time.Duration, reason string) ending {
	e := ending{Outcome: record.OutcomeRetrying, Asynq: endRetry, Delay: delay, Reason: reason, Err: in.D.Err}
	var err error = &retryAfterError{Delay: delay, Reason: reason, Err: in.D.Err}
	if delay < 0 {
		e.Asynq, e.Delay = endInterrupted, 0
		e.Err = in.Cause
		if e.Err == nil {
			e.Err = in.D.Err
		}
		if e.Err == nil {
			e.Err = context.Canceled
		}
		err = &interruptedError{Reason: reason, Err: e.Err}
	}
	switch in.D.Outcome {
	case continuation.StillRunning:
		e.Outcome = record.OutcomeStillRunning
	case continuation.NotAdmitted, continuation.Refused:
		e.Outcome = record.OutcomeNotAdmitted
	}
	if outOfRetries(err, in.Retried, in.MaxRetry) {
		g := endFail(reason, in.D.StopReason)
		g.GaveUp = true
		return g
	}
	return e
}

// outOfRetries reports whether Asynq would archive the task if this attempt
// ended with err: Asynq v0.26 archives a task whose Retried has reached its
// MaxRetry whatever its handler returned, a put-back too. A failure
// (IsFailure) uses a retry, a put-back (busy, waiting for an answer or for
// its turn) does not. A client gives a task one retry more than
// ClientConfig.MaxRetry (TaskOptions), kept for put-backs: a failure is
// retried while retried < maxRetry-1, so that a put-back always finds a
// retry left — but after a crash on the last attempt (Asynq's recoverer
// counts it). An attempt out of retries ends the turn with its final error
// event instead (fail, giveUp): never archived in silence.
func outOfRetries(err error, retried, maxRetry int) bool {
	if IsFailure(err) {
		return retried+1 >= maxRetry
	}
	return retried >= maxRetry
}

// threadUnresolved is the decision of an attempt whose thread could not be
// resolved (lettaRun.resolveThread): a permanent Letta refusal (unknown
// agent) fails the turn; the attempt's own end (its context) interrupts
// it; the rest (Letta unreachable, a 5xx, the resolution's own time limit
// with Letta not answering) is a transient failure, retried after the
// backoff.
func threadUnresolved(ctx context.Context, err error) continuation.Result {
	reason := "could not resolve the agent's Letta conversation: " + err.Error()
	if ctx.Err() != nil || errors.Is(err, context.Canceled) {
		return continuation.Result{Outcome: continuation.Interrupted, Err: err, Reason: reason}
	}
	retryable := agentclient.Classify(err) != agentclient.Permanent
	return continuation.Result{Outcome: continuation.Rejected, Err: err, Retryable: retryable, Reason: reason}
}
