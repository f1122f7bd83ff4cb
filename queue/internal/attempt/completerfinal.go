package attempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
	"github.com/lettaq/lettaq/queue/record"
)

// The final event and the ends that write it here: an attempt whose end has an answer (or
// an approval request) delivers it (Deliver); one that failed for good, or is out of
// retries, says so (fail, GiveUp, and retryEarly for an attempt that could not start); every
// end writes its final event (finalEvent, with the merged messages' own) and stamps its
// record finished here.

// Deliver emits the final event once, writes the result and journals the
// finished turn.
func (c *completer) Deliver(ctx context.Context, log *slog.Logger, outcome string, ev record.ReplyEvent, answer string, approval *record.ToolEvent) error {
	ev.TaskID, ev.Otid, ev.MessageID, ev.RunID = c.TaskID, c.Otid, c.Msg.MessageID, c.jr.Rec().RunID
	if len(c.line.Followers()) > 0 {
		ev.AnsweredBy = c.TaskID
	}
	if len(c.line.Followers()) == 0 && c.Msg.Approval == nil && c.w.Trips.OneRedis {
		return c.deliverAtOnce(ctx, log, outcome, ev, answer, approval)
	}
	emitted, err := c.finalEvent(ctx, ev) // after the attempt's progress, in one round trip
	if err != nil {
		return c.undelivered(ctx, log, err)
	}
	if !emitted {
		log.Info("final event already written by an earlier attempt")
	}
	c.finishFollowers(ctx, ev)
	c.ap.Answered(ctx, log)
	now := c.finished(outcome, ev.StopReason)
	if err := c.Save(ctx, append(c.resultOps(outcome, answer, approval), c.line.ReleaseOps("")...)...); err != nil {
		log.Warn("could not journal the finished turn", "error", err.Error())
	}
	return c.delivered(log, outcome, answer, now)
}

// deliverAtOnce is deliver for a turn with no merged messages and no
// approval answer: its progress, final event, finished record, result and
// release go in one round trip, the final event first. If the event is not
// written the attempt retries (and journals that); a record saying
// answered without the event's marker is not taken for finished by the
// next attempt (see the turn's prepare).
func (c *completer) deliverAtOnce(ctx context.Context, log *slog.Logger, outcome string, ev record.ReplyEvent, answer string, approval *record.ToolEvent) error {
	defer c.progress.EndEvents()
	marker := c.w.Replies.AnsweredKey(ev.TaskID)
	pe, err := c.progress.Prepare(ev, marker)
	if err != nil {
		return c.undelivered(ctx, log, err)
	}
	now := c.finished(outcome, ev.StopReason)
	save, err := c.jr.SaveOp(false)
	if err != nil {
		return c.undelivered(ctx, log, err)
	}
	// The release happens only with the final event written (its marker):
	// a pipeline's commands each run on their own. The record
	// and the result may land without the event; the next attempt, which
	// does not take a record without the marker for finished (see the turn's prepare),
	// writes over them.
	ops := append(append([]store.Op{save}, c.resultOps(outcome, answer, approval)...), c.line.ReleaseOps(marker)...)
	ops = append(ops, c.tk.UnregisterOps()...) // (queue/internal/takeover)
	c.progress.DropQueuedSaves()               // this record is newer
	c.jr.Lock()
	lat, ttft := c.jr.Latency(now), c.jr.Rec().TTFT
	c.jr.Unlock()
	late := func(err error) {
		// The attempt stopped waiting and retries; the writes landed after
		// all, so the next attempt finds the turn finished and reports
		// nothing: the turn finished here.
		if pe.Written() {
			log.Info("the final event was written after the attempt stopped waiting for it: turn finished", "outcome", outcome)
			c.obs.TurnFinished(c.Queue, outcome, lat, ttft)
		}
	}
	err = c.progress.DoThen(ctx, late, []*progress.Event{pe}, ops...)
	if errors.Is(err, progress.ErrNotWaited) { // pe is not ours to read (late reads it)
		return c.undelivered(ctx, log, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err))
	}
	wrote := pe.Written()
	switch {
	case errors.Is(pe.Err(), takeover.ErrTakenOver):
		// Fenced: nothing was written. The marker the next check would
		// find is the takeover's answer, not this attempt's.
		return c.tk.EndTakenOver()
	case pe.Err() != nil:
		// The write may have happened all the same (a reply lost on the
		// way back): the answered marker says.
		if ok, aerr := c.w.Replies.Answered(ctx, c.TaskID); aerr != nil || !ok {
			return c.undelivered(ctx, log, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, pe.Err()))
		}
		log.Info("the final event was written though its write reported an error", "error", pe.Err().Error())
		wrote = true // by this attempt, as far as it can tell: it counts the turn
		if err != nil && !errors.Is(err, pe.Err()) {
			log.Warn("could not journal the finished turn", "error", err.Error())
		}
	case err != nil:
		c.RedisFailed()
		log.Warn("could not journal the finished turn", "error", err.Error())
	}
	if !wrote {
		// An earlier attempt's write landed after this attempt had
		// started: that attempt counts the turn (late, above), not this
		// one, or the turn would be counted twice.
		log.Info("final event already written by an earlier attempt: the turn is counted by it")
		return c.deliveredBy(log, outcome, answer, now, false)
	}
	return c.delivered(log, outcome, answer, now)
}

func (c *completer) delivered(log *slog.Logger, outcome, answer string, now time.Time) error {
	return c.deliveredBy(log, outcome, answer, now, true)
}

// deliveredBy ends a delivered attempt; count says it reports the turn
// finished (only the attempt whose write put the final event there does).
func (c *completer) deliveredBy(log *slog.Logger, outcome, answer string, now time.Time, count bool) error {
	log.Info("turn finished", "outcome", outcome, "attempt", c.jr.Current().N, "answer_bytes", len(answer))
	c.obs.attemptFinished(c.Queue, "done", time.Since(c.Start))
	if count {
		c.obs.TurnFinished(c.Queue, outcome, c.jr.Latency(now), c.jr.Rec().TTFT)
	}
	return nil
}

// undelivered ends an attempt whose final event could not be written.
func (c *completer) undelivered(ctx context.Context, log *slog.Logger, err error) error {
	if errors.Is(err, takeover.ErrTakenOver) || c.rn.IsFenced() {
		return c.tk.EndTakenOver() // not written because another worker continues the turn
	}
	// The answer is the whole point: retry; the next attempt finds the
	// run by its id and polls the answer again.
	c.RedisFailed()
	c.jr.Lock()
	c.jr.Current().Outcome, c.jr.Current().Error = record.OutcomeRetrying, err.Error()
	c.jr.Rec().Outcome, c.jr.Rec().FinishedAt, c.jr.Rec().StopReason = "", time.Time{}, ""
	c.jr.Unlock()
	// Whether this attempt's finish reached Redis is not known (it may
	// still, late): never write the retry over a finished record.
	if c.w.Trips.OneRedis {
		if op, err := c.jr.SaveOp(true); err == nil {
			c.progress.DropQueuedSaves()
			_ = c.progress.Do(ctx, nil, op)
		}
	} else {
		_ = c.Save(ctx)
	}
	rerr := &retryAfterError{Delay: time.Second, Reason: "deliver the answer", Err: err}
	if c.noRetryLeft(rerr) {
		return c.fail(ctx, log, fmt.Sprintf("gave up after %d attempts: could not deliver the answer: %s", c.Retried+1, err.Error()), "")
	}
	log.Warn("could not deliver the answer, retrying", "outcome", record.OutcomeRetrying, "error", err.Error())
	c.obs.attemptFinished(c.Queue, "retry", time.Since(c.Start))
	return rerr
}

// finishDelivered finishes a turn whose final event reached the reply
// stream although the attempt that wrote it did not hear so (the write
// outlasted the delivery allowance, or the worker died right after it):
// the journal gets its outcome and finished_at, the task its result, and
// the metrics count the turn, once — a later attempt finds the outcome
// journaled and does nothing. Nothing is sent or emitted again.
func (c *completer) finishDelivered(ctx context.Context, rec *record.TurnRecord) error {
	w := c.w
	ev, found, err := w.Replies.FinalEvent(ctx, c.Msg.Conversation, c.TaskID)
	if err != nil {
		return c.retryEarly(err)
	}
	outcome, answer, reason := record.OutcomeAnswered, "", ""
	var approval *record.ToolEvent
	switch {
	case !found:
		rec.Warnings = appendUnique(rec.Warnings, "final event written but no longer in the reply stream: outcome taken as answered")
	case ev.Type == record.EventError && ev.StopReason == record.StopReasonCancelled:
		outcome = record.OutcomeCancelled
	case ev.Type == record.EventError:
		outcome, reason = record.OutcomeFailed, ev.Text
	case ev.Type == record.EventApprovalRequired:
		outcome, approval, answer = record.OutcomeApprovalRequired, ev.Tool, ev.Text
	default:
		answer = ev.Text
	}
	now := time.Now()
	c.jr.Lock()
	rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: w.Cfg.WorkerID, Start: c.Start,
		End: now.UTC(), Outcome: outcome, Error: reason})
	c.jr.Begin(rec)
	rec.Outcome, rec.Error, rec.FinishedAt = outcome, reason, now.UTC()
	if found {
		rec.StopReason = ev.StopReason
		if rec.RunID == "" {
			rec.RunID = ev.RunID
		}
	}
	c.jr.Unlock()
	c.ids.setRunID(rec.RunID)
	if err := c.Save(ctx); err != nil {
		return c.retryEarly(err)
	}
	if found {
		// Merged messages get their final events too, if that attempt
		// could not write them.
		if err := c.line.TakeFollowers(ctx, c.Msg.Conversation.Integration, false); err != nil {
			c.log.Warn("could not load the merged messages of a delivered turn", "error", err.Error())
		} else {
			c.finishFollowers(ctx, ev)
		}
	}
	c.ap.Ended(ctx, c.log, outcome == record.OutcomeFailed || outcome == record.OutcomeCancelled) // an answer turn's request may not have been told
	c.log.Info("final event was delivered by an earlier attempt; turn finished", "outcome", outcome,
		"attempt", len(rec.Attempts), "answer_bytes", len(answer))
	if outcome == record.OutcomeFailed || outcome == record.OutcomeCancelled {
		c.obs.attemptFinished(c.Queue, "archived", time.Since(c.Start))
		c.obs.TurnFinished(c.Queue, outcome, c.jr.Latency(now), rec.TTFT)
		c.writeResult(outcome, "", nil)
		return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
	}
	c.writeResult(outcome, answer, approval)
	c.obs.attemptFinished(c.Queue, "done", time.Since(c.Start))
	c.obs.TurnFinished(c.Queue, outcome, c.jr.Latency(now), rec.TTFT)
	return nil
}

// coalesced ends a task whose message was merged into the turn of head:
// the journal says so (outcome coalesced, AnsweredBy); the final reply
// event of the message is written by head's turn when it ends (an answer
// with answered_by and no text, or a permanent error).
func (c *completer) coalesced(ctx context.Context, head string) error {
	dctx, cancel := c.w.deliveryCtx(ctx)
	defer cancel()
	rec, err := c.w.Journal.Get(dctx, c.TaskID)
	if err != nil {
		rec = &record.TurnRecord{}
	}
	now := time.Now()
	rec.TaskID, rec.Otid, rec.AgentID = c.TaskID, c.Otid, c.Msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = c.Msg.Conversation, c.Msg.MessageID, c.Queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = c.Msg.EnqueuedAt
	}
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = c.Start
	}
	if rec.Outcome != record.OutcomeCoalesced {
		rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: c.w.Cfg.WorkerID,
			Start: c.Start, End: now.UTC(), Outcome: record.OutcomeCoalesced})
	}
	rec.Outcome, rec.AnsweredBy, rec.FinishedAt = record.OutcomeCoalesced, head, now.UTC()
	c.jr.SetRecord(rec)
	if err := c.w.Journal.Save(dctx, rec); err != nil {
		c.RedisFailed()
		c.log.Warn("could not journal the coalesced turn", "error", err.Error())
	}
	c.writeResult(record.OutcomeCoalesced, "", nil)
	c.log.Info("message merged into an earlier turn", "answered_by", head)
	c.obs.attemptFinished(c.Queue, "done", time.Since(c.Start))
	c.obs.TurnFinished(c.Queue, record.OutcomeCoalesced, c.jr.Latency(now), 0)
	return nil
}

// finalEvent writes the attempt's final event once per turn (see
// Replies.EmitAnswerOnce) after its progress, in one round trip; no
// progress event of the attempt follows it.
func (c *completer) finalEvent(ctx context.Context, ev record.ReplyEvent) (emitted bool, err error) {
	if ev.Type == "" {
		ev.Type = record.EventAnswer
	}
	defer c.progress.EndEvents()
	pe, err := c.progress.Prepare(ev, c.w.Replies.AnsweredKey(ev.TaskID))
	if err != nil {
		return false, err
	}
	if err := c.progress.Do(ctx, []*progress.Event{pe}); err != nil {
		return false, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err)
	}
	return pe.Written(), nil
}

// finishFollowers writes the final event of every merged message: ev's
// kind, naming this turn in answered_by (an answer carries no text: the
// text is in this turn's answer).
func (c *completer) finishFollowers(ctx context.Context, ev record.ReplyEvent) {
	for _, f := range c.line.Followers() {
		fe := record.ReplyEvent{Type: ev.Type, TaskID: f.TaskID, Otid: c.Otid, RunID: ev.RunID, MessageID: f.MessageID,
			StopReason: ev.StopReason, Permanent: ev.Permanent, AnsweredBy: c.TaskID, Tool: ev.Tool}
		if ev.Type == record.EventError {
			fe.Text = "the turn this message was merged into failed: " + ev.Text
		}
		if _, err := c.w.Replies.EmitAnswerOnce(ctx, f.Conversation, fe); err != nil {
			c.RedisFailed()
			c.log.Warn("could not emit the merged message's final event", "merged_task", f.TaskID, "error", err.Error())
		}
	}
}

// finished marks the record finished with outcome.
func (c *completer) finished(outcome, stopReason string) time.Time {
	now := time.Now()
	c.jr.Lock()
	c.jr.Current().Outcome = outcome
	c.jr.Rec().Outcome, c.jr.Rec().FinishedAt, c.jr.Rec().StopReason, c.jr.Rec().Error = outcome, now.UTC(), stopReason, ""
	c.jr.Unlock()
	return now
}

// fail ends the turn with a permanent error: one error event, the journal,
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

// retryEarly ends an attempt that failed before it could run (Redis
// trouble, sequencer): Asynq retries with backoff.
func (c *completer) retryEarly(err error) error {
	c.RedisFailed()
	rerr := fmt.Errorf("lettaq: turn %s: %w", c.TaskID, err)
	if c.noRetryLeft(rerr) {
		return c.GiveUp("could not start: " + err.Error())
	}
	c.log.Warn("turn attempt could not start", "error", err.Error())
	c.obs.attemptFinished(c.Queue, "retry", time.Since(c.Start))
	return rerr
}
