package attempt

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/lettaq/lettaq/queue/internal/record"
)

// Fail ends the turn with a permanent error: one error event, the journal,
// and SkipRetry so that Asynq archives the task.
func (c *completer) fail(ctx context.Context, log *slog.Logger, reason, stop string) error {
	ev := record.ReplyEvent{Type: record.EventError, TaskID: c.TaskID,
		Otid: c.Otid, RunID: c.jr.Rec().RunID, MessageID: c.Msg.MessageID, Text: reason, StopReason: stop, Permanent: true}
	if len(c.line.Followers()) > 0 {
		ev.AnsweredBy = c.TaskID
	}
	// An answer turn's request learns first: a user who reads the error
	// and answers again finds the request answerable.
	c.ap.Ended(ctx, log, true)
	if _, err := c.finalEvent(ctx, ev); err != nil {
		c.RedisFailed()
		log.Warn("could not emit the error event", "error", err.Error())
	}
	c.finishFollowers(ctx, ev)
	now := time.Now()
	c.jr.Lock()
	c.jr.Current().Outcome, c.jr.Current().Error = record.OutcomeFailed, reason
	c.jr.Rec().Outcome, c.jr.Rec().Error, c.jr.Rec().StopReason, c.jr.Rec().FinishedAt = record.OutcomeFailed, reason, stop, now.UTC()
	c.jr.Unlock()
	if err := c.Save(ctx, c.line.ReleaseOps("")...); err != nil {
		if c.rn.IsFenced() {
			return c.tk.EndTakenOver() // its writes were dropped: the takeover ends the turn
		}
		log.Warn("could not journal the failed turn", "error", err.Error())
	}
	if stop != "" {
		log = log.With("stop_reason", stop)
	}
	log.Warn("turn failed", "outcome", record.OutcomeFailed, "reason", reason)
	c.w.Permanent.Add(c.TaskID, "otid", c.Otid, "run_id", c.jr.Rec().RunID) // for the archiving's log line
	c.obs.attemptFinished(c.Queue, "archived", time.Since(c.Start))
	c.obs.TurnFinished(c.Queue, record.OutcomeFailed, c.jr.Latency(now), c.jr.Rec().TTFT)
	return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
}

// GiveUp ends a turn whose attempt is out of retries (outOfRetries) with a
// permanent error: through fail once the attempt has its journal record,
// else (the attempt ended before it ran: its turn never came, or Redis
// failed it) with the final error event and a failed record of its own, and
// the turn leaves its conversation's line.
func (c *completer) GiveUp(reason string) error {
	ctx, cancel := c.w.deliveryCtx(c.actx)
	defer cancel()
	reason = fmt.Sprintf("gave up after %d attempts: %s", c.Retried+1, reason)
	if c.jr.Rec() != nil && len(c.jr.Rec().Attempts) > c.jr.Index() {
		return c.fail(ctx, c.log, reason, "")
	}
	w := c.w
	ev := record.ReplyEvent{Type: record.EventError, TaskID: c.TaskID, Otid: c.Otid, MessageID: c.Msg.MessageID, Text: reason, Permanent: true}
	emitted, err := w.Replies.EmitAnswerOnce(ctx, c.Msg.Conversation, ev)
	if err != nil {
		c.RedisFailed()
		c.log.Warn("could not emit the error event", "error", err.Error())
	} else if !emitted {
		// An earlier attempt wrote the turn's final event (and crashed
		// before Asynq heard of it): the turn is over, and stays as it
		// ended.
		c.log.Info("turn already finished by an earlier attempt")
		return nil
	}
	rec := c.storedRecord(ctx)
	now := time.Now().UTC()
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = c.Start
	}
	rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: w.Cfg.WorkerID, Start: c.Start.UTC(),
		End: now, Outcome: record.OutcomeFailed, Error: reason})
	rec.Outcome, rec.Error, rec.FinishedAt = record.OutcomeFailed, reason, now
	c.jr.SetRecord(rec)
	if err := w.Journal.Save(ctx, rec); err != nil {
		c.RedisFailed()
		c.log.Warn("could not journal the failed turn", "error", err.Error())
	}
	if w.OrderKey != nil && c.line.Lease() == nil {
		// Never its turn: it leaves the line (a lease, when held, is
		// released as done by the caller), and the turn behind it is woken
		// when it headed the line (its acquire failed at the head).
		if err := c.line.Leave(ctx); err != nil {
			c.RedisFailed()
			c.log.Warn("could not take the failed turn out of its conversation's line", "error", err.Error())
		}
	}
	c.log.Warn("turn failed", "outcome", record.OutcomeFailed, "reason", reason)
	w.Permanent.Add(c.TaskID, "otid", c.Otid)
	c.obs.attemptFinished(c.Queue, "archived", time.Since(c.Start))
	c.obs.TurnFinished(c.Queue, record.OutcomeFailed, c.jr.Latency(now), 0)
	return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
}
