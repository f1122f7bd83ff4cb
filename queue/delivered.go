package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
)

// FinalEvent returns the final event written for taskID's turn in c's
// stream (the one the answered marker points at). found is false when no
// final event was written, or when the stream no longer holds it (trimmed
// by MaxLen or expired).
func (r *Replies) FinalEvent(ctx context.Context, c Conversation, taskID string) (ev ReplyEvent, found bool, err error) {
	if err := c.Validate(); err != nil {
		return ev, false, err
	}
	m, found, err := r.st.FinalEntry(ctx, r.Key(c), taskID)
	if err != nil || !found {
		if err != nil {
			err = fmt.Errorf("queue: final event of %s: %w", taskID, err)
		}
		return ev, false, err
	}
	return replyEventFromEntry(m), true, nil
}

// finishDelivered finishes a turn whose final event reached the reply
// stream although the attempt that wrote it did not hear so (the write
// outlasted the delivery allowance, or the worker died right after it):
// the journal gets its outcome and finished_at, the task its result, and
// the metrics count the turn, once — a later attempt finds the outcome
// journaled and does nothing. Nothing is sent or emitted again.
func (t *turn) finishDelivered(ctx context.Context, rec *TurnRecord) error {
	w := t.w
	ev, found, err := w.replies.FinalEvent(ctx, t.msg.Conversation, t.taskID)
	if err != nil {
		return t.retryEarly(err)
	}
	outcome, answer, reason := OutcomeAnswered, "", ""
	var approval *ToolEvent
	switch {
	case !found:
		rec.Warnings = appendUnique(rec.Warnings, "final event written but no longer in the reply stream: outcome taken as answered")
	case ev.Type == EventError && ev.StopReason == StopReasonCancelled:
		outcome = OutcomeCancelled
	case ev.Type == EventError:
		outcome, reason = OutcomeFailed, ev.Text
	case ev.Type == EventApprovalRequired:
		outcome, approval, answer = OutcomeApprovalRequired, ev.Tool, ev.Text
	default:
		answer = ev.Text
	}
	now := time.Now()
	t.jr.Lock()
	rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: t.start,
		End: now.UTC(), Outcome: outcome, Error: reason})
	t.jr.Begin(rec)
	rec.Outcome, rec.Error, rec.FinishedAt = outcome, reason, now.UTC()
	if found {
		rec.StopReason = ev.StopReason
		if rec.RunID == "" {
			rec.RunID = ev.RunID
		}
	}
	t.jr.Unlock()
	t.ids.setRunID(rec.RunID)
	if err := t.save(ctx); err != nil {
		return t.retryEarly(err)
	}
	if found {
		// Merged messages get their final events too, if that attempt
		// could not write them.
		if err := t.line.TakeFollowers(ctx, t.msg.Conversation.Integration, false); err != nil {
			t.log.Warn("could not load the merged messages of a delivered turn", "error", err.Error())
		} else {
			t.finishFollowers(ctx, ev)
		}
	}
	t.ap.Ended(ctx, t.log, outcome == OutcomeFailed || outcome == OutcomeCancelled) // an answer turn's request may not have been told
	t.log.Info("final event was delivered by an earlier attempt; turn finished", "outcome", outcome,
		"attempt", len(rec.Attempts), "answer_bytes", len(answer))
	if outcome == OutcomeFailed || outcome == OutcomeCancelled {
		t.obs.AttemptFinished(t.queue, "archived", time.Since(t.start))
		t.obs.TurnFinished(t.queue, outcome, t.jr.Latency(now), rec.TTFT)
		t.writeResult(outcome, "", nil)
		return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
	}
	t.writeResult(outcome, answer, approval)
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	t.obs.TurnFinished(t.queue, outcome, t.jr.Latency(now), rec.TTFT)
	return nil
}
