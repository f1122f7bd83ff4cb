package attempt

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

// endCancelled ends the turn cancelled: the final event (error, permanent,
// stop_reason cancelled, text what the agent had said), the journal
// (outcome cancelled, record.TurnRecord.Cancel) and the task's result (outcome
// cancelled): the task completes, never retried. A cancel is a normal
// ending, not a failure (an archived task counts in Asynq's failed
// metrics). The conversation is released with the journal's save.
func (c *completer) endCancelled(ctx context.Context, log *slog.Logger, cr record.CancelRecord, phase, text string) error {
	c.cx.End()
	dctx, cancel := c.w.deliveryCtx(ctx)
	defer cancel()
	cr.Phase = phase
	c.jr.Lock()
	runID := c.jr.Rec().RunID
	c.jr.Unlock()
	ev := record.ReplyEvent{Type: record.EventError, TaskID: c.TaskID, Otid: c.Otid, RunID: runID, MessageID: c.Msg.MessageID,
		Text: text, StopReason: record.StopReasonCancelled, Permanent: true}
	if len(c.line.Followers()) > 0 {
		ev.AnsweredBy = c.TaskID
	}
	c.ap.Ended(dctx, log, true)
	if emitted, err := c.finalEvent(dctx, ev); err != nil {
		c.RedisFailed()
		log.Warn("could not emit the cancelled event", "error", err.Error())
	} else if !emitted {
		log.Info("final event already written by an earlier attempt")
	}
	c.finishFollowers(dctx, ev)
	now := time.Now()
	c.jr.Lock()
	a := c.jr.Current()
	if a.End.IsZero() {
		a.End = now.UTC()
	}
	a.Outcome, a.Error = record.OutcomeCancelled, ""
	c.jr.Rec().Outcome, c.jr.Rec().Error, c.jr.Rec().StopReason, c.jr.Rec().FinishedAt, c.jr.Rec().Cancel = record.OutcomeCancelled, "", record.StopReasonCancelled, now.UTC(), &cr
	if text != "" {
		c.jr.Rec().PartialAnswer = cutText(text, maxPartialAnswer)
	}
	c.jr.Unlock()
	if err := c.Save(dctx, append(c.resultOps(record.OutcomeCancelled, text, nil), c.line.ReleaseOps("")...)...); err != nil {
		log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	log.Info("turn cancelled", "outcome", record.OutcomeCancelled, "phase", phase, "by", cr.By, "answer_bytes", len(text))
	c.obs.attemptFinished(c.Queue, "done", time.Since(c.Start))
	c.w.turnCancelled(c.Queue, phase)
	c.obs.TurnFinished(c.Queue, record.OutcomeCancelled, c.jr.Latency(now), c.jr.Rec().TTFT)
	return nil
}

// cancelWaiting ends a cancelled turn that is not its chat's turn (its
// attempt holds no lease and has no record yet): never sent, it leaves the
// line with its final event and a journal record saying cancelled.
func (c *completer) cancelWaiting(ctx context.Context, nyt error) error {
	w := c.w
	c.line.WakeAfterDeadHeads(ctx, nyt)
	dctx, cancel := w.deliveryCtx(ctx)
	defer cancel()
	cr := *c.cx.Asked()
	cr.Phase = record.CancelPhaseWaiting
	c.cx.End()
	ev := record.ReplyEvent{Type: record.EventError, TaskID: c.TaskID, Otid: c.Otid, MessageID: c.Msg.MessageID,
		StopReason: record.StopReasonCancelled, Permanent: true}
	if _, err := w.Replies.EmitAnswerOnce(dctx, c.Msg.Conversation, ev); err != nil {
		return c.retryEarly(fmt.Errorf("write the cancelled event: %w", err))
	}
	rec := c.storedRecord(dctx)
	now := time.Now().UTC()
	rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: w.Cfg.WorkerID, Start: c.Start.UTC(),
		End: now, Outcome: record.OutcomeCancelled})
	rec.Outcome, rec.StopReason, rec.FinishedAt, rec.Error, rec.Cancel = record.OutcomeCancelled, record.StopReasonCancelled, now, "", &cr
	c.jr.SetRecord(rec)
	if err := w.Journal.Save(dctx, rec); err != nil {
		c.RedisFailed()
		c.log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	if err := c.line.Leave(dctx); err != nil {
		c.RedisFailed()
		c.log.Warn("could not take the cancelled turn out of its conversation's line", "error", err.Error())
	}
	c.writeResult(record.OutcomeCancelled, "", nil)
	c.log.Info("turn cancelled", "outcome", record.OutcomeCancelled, "phase", record.CancelPhaseWaiting, "by", cr.By)
	c.obs.attemptFinished(c.Queue, "done", time.Since(c.Start))
	w.turnCancelled(c.Queue, record.CancelPhaseWaiting)
	c.obs.TurnFinished(c.Queue, record.OutcomeCancelled, c.jr.Latency(now), 0)
	return nil // completed with the cancelled result: a normal ending, not a failure
}

// turnCancelled tells the observer of a cancelled turn (CancelObserver).
func (w *Parts) turnCancelled(queue, phase string) {
	if o, ok := w.Obs.(CancelObserver); ok {
		o.TurnCancelled(queue, phase)
	}
}
