package queue

import (
	"context"
	"fmt"
	"time"
)

// busyError puts a turn back while its Letta thread is busy with another
// run: no failure (isFailure says false, so Asynq does not count a retry),
// retried after Delay (retryDelay reads it).
type busyError struct {
	Delay  time.Duration
	Reason string
	Err    error
}

func (e *busyError) Error() string {
	return fmt.Sprintf("lettaq: %s (retry in %v)", e.Reason, e.Delay)
}

func (e *busyError) Unwrap() error { return e.Err }

// busyRetry is the delay before a turn refused as busy tries again: the
// server's Retry-After, else a backoff of 1 s doubling per busy attempt in
// a row, up to 16 s.
func busyRetry(retryAfter time.Duration, busyInARow int) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := time.Second
	for i := 1; i < busyInARow && d < 16*time.Second; i++ {
		d *= 2
	}
	return min(d, 16*time.Second)
}

// busy ends an attempt refused because the thread is busy with another
// run: the turn is put back (not a failure, not a resend).
func (t *turn) busy(ctx context.Context, e ending) error {
	t.progress.End(ctx)
	if e.GaveUp {
		return t.giveUp(e.Reason)
	}
	t.jr.Lock()
	t.jr.Current().Outcome, t.jr.Current().Error, t.jr.Current().RetryIn = e.Outcome, e.Reason, e.Delay
	attempt := t.jr.Current().N
	t.jr.Unlock()
	// The refused send stored nothing: the next attempt sends without
	// searching for the otid first.
	if err := t.w.journal.RecordRefusal(ctx, t.taskID, t.otid, attempt, t.w.cfg.WorkerID); err != nil {
		t.redisFailed()
		t.log.Warn("could not journal the refusal; the next attempt looks for the otid first", "error", err.Error())
	}
	if err := t.save(ctx); err != nil {
		if t.rn.IsFenced() {
			return t.tk.EndTakenOver() // the takeover goes on with the turn
		}
		t.log.Warn("could not journal the attempt", "error", err.Error())
	}
	t.log.Info("the agent's thread is busy with another run; the turn waits", "reason", e.Reason, "retry_in", e.Delay.String())
	t.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	return &busyError{Delay: e.Delay, Reason: e.Reason, Err: e.Err}
}
