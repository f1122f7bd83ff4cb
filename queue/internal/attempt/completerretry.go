package attempt

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// retryLater ends the attempt and leaves the turn to the next one (e, from
// endOf: a retry, an interruption, or a retry given up for want of retries).
func (c *completer) retryLater(ctx context.Context, log *slog.Logger, e ending) error {
	c.progress.End(ctx)
	if e.GaveUp {
		return c.fail(ctx, log, fmt.Sprintf("gave up after %d attempts: %s", c.Retried+1, e.Reason), e.StopReason)
	}
	var rerr error = &retryAfterError{Delay: e.Delay, Reason: e.Reason, Err: e.Err}
	if e.Asynq == endInterrupted {
		rerr = &interruptedError{Reason: e.Reason, Err: e.Err}
	}
	c.jr.Lock()
	c.jr.Current().Outcome, c.jr.Current().Error = e.Outcome, e.Reason
	if e.Asynq == endRetry {
		c.jr.Current().RetryIn = e.Delay
	}
	c.jr.Unlock()
	if err := c.Save(ctx); err != nil {
		if c.rn.IsFenced() {
			return c.tk.EndTakenOver() // the takeover goes on with the turn, not a retry
		}
		log.Warn("could not journal the attempt", "error", err.Error())
	}
	log.Info("turn attempt ends, retrying", "outcome", e.Outcome, "reason", e.Reason, "retry_in", e.Delay.String())
	c.obs.attemptFinished(c.Queue, "retry", time.Since(c.Start))
	return rerr
}

// busy ends an attempt refused because the thread is busy with another
// run: the turn is put back (not a failure, not a resend).
func (c *completer) busy(ctx context.Context, e ending) error {
	c.progress.End(ctx)
	if e.GaveUp {
		return c.GiveUp(e.Reason)
	}
	c.jr.Lock()
	c.jr.Current().Outcome, c.jr.Current().Error, c.jr.Current().RetryIn = e.Outcome, e.Reason, e.Delay
	n := c.jr.Current().N
	c.jr.Unlock()
	// The refused send stored nothing: the next attempt sends without
	// searching for the otid first.
	if err := c.w.Journal.RecordRefusal(ctx, c.TaskID, c.Otid, n, c.w.Cfg.WorkerID); err != nil {
		c.RedisFailed()
		c.log.Warn("could not journal the refusal; the next attempt looks for the otid first", "error", err.Error())
	}
	if err := c.Save(ctx); err != nil {
		if c.rn.IsFenced() {
			return c.tk.EndTakenOver() // the takeover goes on with the turn
		}
		c.log.Warn("could not journal the attempt", "error", err.Error())
	}
	c.log.Info("the agent's thread is busy with another run; the turn waits", "reason", e.Reason, "retry_in", e.Delay.String())
	c.obs.attemptFinished(c.Queue, "busy", time.Since(c.Start))
	return &busyError{Delay: e.Delay, Reason: e.Reason, Err: e.Err}
}
