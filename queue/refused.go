package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// MaxServerRetryAfter caps the wait a refusal's Retry-After asks for
// (continuation.Refused: a deploy's 503, Letta's API rate limit). A longer
// one is reported (in the attempt's error and a warning), not obeyed.
const MaxServerRetryAfter = time.Minute

// refusalWait is the delay before a refused turn sends again: the
// server's Retry-After up to MaxServerRetryAfter (0 without one: the
// usual backoff), and a note when the server asked for more.
func refusalWait(retryAfter time.Duration) (delay time.Duration, note string) {
	if retryAfter > MaxServerRetryAfter {
		return MaxServerRetryAfter, fmt.Sprintf("Letta asked to wait %s (Retry-After), more than the %s cap: sending again after %s",
			retryAfter, MaxServerRetryAfter, MaxServerRetryAfter)
	}
	return retryAfter, ""
}

// refused ends an attempt whose send the server refused saying it stored
// nothing (continuation.Refused): the intent is withdrawn (the next
// attempt sends at once, same otid, without looking for it), the attempt
// is journaled not admitted with the server's word as its error, and the
// turn retries after the server's Retry-After (capped).
func (t *turn) refused(ctx context.Context, log *slog.Logger, d continuation.Result) error {
	t.mu.Lock()
	n := t.attempt().N
	t.mu.Unlock()
	if err := t.w.journal.RecordRefusal(ctx, t.taskID, t.otid, n, t.w.cfg.WorkerID); err != nil {
		t.redisFailed()
		log.Warn("could not journal the refusal; the next attempt looks for the otid first", "error", err.Error())
	}
	delay, note := refusalWait(agentclient.RetryAfter(d.Err))
	if delay == 0 {
		delay = t.backoff()
	}
	reason := d.Reason
	if note != "" {
		reason += "; " + note
		log.Warn("Retry-After beyond the cap: not obeyed", "retry_after", agentclient.RetryAfter(d.Err).String(),
			"cap", MaxServerRetryAfter.String())
	}
	return t.retry(ctx, log, d, delay, reason)
}

// backoff is the delay before the next attempt of a turn refused without
// a Retry-After (a model rate limit, a refusal naming no delay): 2 s
// doubling per retry already made, up to MaxServerRetryAfter. (A
// *RetryAfterError with no delay would be retried at once; Asynq keeps a
// retry's time in whole seconds, so 2 s is at least 1.)
func (t *turn) backoff() time.Duration {
	d := 2 * time.Second
	for i := 0; i < t.retried && d < MaxServerRetryAfter; i++ {
		d *= 2
	}
	return min(d, MaxServerRetryAfter)
}
