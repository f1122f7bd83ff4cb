package queue

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/internal/cancelsub"
)

// The worker's side of a cancel (Client.Cancel; see cancel.go).
//
// A turn learns of its cancel three ways: its attempt's start reads the
// record (with the start's other reads, before the ordering acquire can put
// it back); the worker's subscription to the cancel channel hears the task
// id while the attempt runs (and reads the records of its running turns
// whenever it (re)subscribes, for what it missed); beforeSend reads it again
// in the intent's round trip. Then:
//
//   - nothing was sent yet (no intent, no run): the turn ends at once,
//     cancelled (endCancelled, or cancelWaiting when it is not its chat's
//     turn), never sent;
//   - about to send: beforeSend refuses, the turn ends cancelled;
//   - its run is underway (streaming, followed after a lost stream, or found
//     by the attempt that recovers a turn whose worker died): the worker asks
//     Letta to cancel it (askLetta: the conversation's cancel, or in agent
//     mode the agent endpoint's cancel of the run, once its id is known), and
//     lets the run end as Letta ends it: the stream (or the run, polled) says
//     cancelled, and the turn ends cancelled with what the agent had said; a
//     run that ended first is answered as usual (cancelEnds).
//
// A cancelled turn's attempt returns nil with its result written (outcome
// cancelled): the task completes, never retried, and counts as processed,
// not failed, in Asynq's metrics.

// CancelObserver is an Observer that is also told of cancelled turns (the
// phase is one of the CancelPhase… constants). A worker's Observer that
// implements it is told.
type CancelObserver interface {
	TurnCancelled(queue, phase string)
}

// cancelRun is the turn as its cancel's view of the attempt (cancel.Run,
// cancel.Attempt): (*cancelRun)(t).
type cancelRun turn

func (r *cancelRun) RunID() string { return r.ids.currentRunID() }

func (r *cancelRun) Log() *slog.Logger { return r.log }

// ReadCancel reads the turn's cancel record.
func (r *cancelRun) ReadCancel(ctx context.Context) ([]byte, bool, error) {
	return r.w.replies.st.GetCancel(ctx, r.taskID)
}

// NoteCancel notes the cancel the channel published (cancel.Running).
func (r *cancelRun) NoteCancel(b []byte, readErr error) {
	t := (*turn)(r)
	if readErr != nil {
		t.log.Warn("could not read the turn's cancel record", "error", readErr.Error())
		b = nil // the publish says there is one
	}
	t.cx.NoteJSON(b, r)
}

// CancelRun asks Letta to cancel the turn's run: the conversation's cancel,
// or on the agent endpoints the agent's cancel of this run.
func (r *cancelRun) CancelRun(conv, runID string) error {
	t := (*turn)(r)
	ctx, cancel := context.WithTimeout(t.detached(), t.w.cfg.Budget.RequestTimeout)
	defer cancel()
	var err error
	if conv == "" {
		_, err = t.w.client.CancelRuns(ctx, t.msg.AgentID, []string{runID})
	} else {
		_, err = t.w.client.CancelConversation(ctx, conv, t.msg.AgentID)
	}
	return err
}

// cancelSubscriber is the worker's subscription to the cancel channel
// (queue/internal/cancelsub): a cancel of a turn this worker runs is noted
// on the turn (cancel.Turn.NoteJSON); on every (re)subscription the records of the
// running turns are read, for the cancels published while the worker was
// not subscribed (cancel.Running).
func (w *Worker) cancelSubscriber() *cancelsub.Subscriber {
	return &cancelsub.Subscriber{Subscribe: w.replies.st.SubscribeCancels, Resync: w.cancels.Resync, Heard: w.cancels.Heard}
}

// watchCancels follows the cancel channel until ctx ends.
func (w *Worker) watchCancels(ctx context.Context) { w.cancelSubscriber().Run(ctx) }

// endCancelled ends the turn cancelled: the final event (error, permanent,
// stop_reason cancelled, text what the agent had said), the journal
// (outcome cancelled, TurnRecord.Cancel) and the task's result (outcome
// cancelled): the task completes, never retried. A cancel is a normal
// ending, not a failure (an archived task counts in Asynq's failed
// metrics). The conversation is released with the journal's save.
func (t *turn) endCancelled(ctx context.Context, log *slog.Logger, cr CancelRecord, phase, text string) error {
	t.cx.End()
	dctx, cancel := t.w.deliveryCtx(ctx)
	defer cancel()
	cr.Phase = phase
	t.jr.Lock()
	runID := t.jr.Rec().RunID
	t.jr.Unlock()
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID, Otid: t.otid, RunID: runID, MessageID: t.msg.MessageID,
		Text: text, StopReason: StopReasonCancelled, Permanent: true}
	if len(t.line.Followers()) > 0 {
		ev.AnsweredBy = t.taskID
	}
	t.ap.Ended(dctx, log, true)
	if emitted, err := t.finalEvent(dctx, ev); err != nil {
		t.redisFailed()
		log.Warn("could not emit the cancelled event", "error", err.Error())
	} else if !emitted {
		log.Info("final event already written by an earlier attempt")
	}
	t.finishFollowers(dctx, ev)
	now := time.Now()
	t.jr.Lock()
	a := t.jr.Current()
	if a.End.IsZero() {
		a.End = now.UTC()
	}
	a.Outcome, a.Error = OutcomeCancelled, ""
	t.jr.Rec().Outcome, t.jr.Rec().Error, t.jr.Rec().StopReason, t.jr.Rec().FinishedAt, t.jr.Rec().Cancel = OutcomeCancelled, "", StopReasonCancelled, now.UTC(), &cr
	if text != "" {
		t.jr.Rec().PartialAnswer = cutText(text, maxPartialAnswer)
	}
	t.jr.Unlock()
	if err := t.save(dctx, append(t.resultOps(OutcomeCancelled, text, nil), t.line.ReleaseOps("")...)...); err != nil {
		log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	log.Info("turn cancelled", "outcome", OutcomeCancelled, "phase", phase, "by", cr.By, "answer_bytes", len(text))
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	t.w.turnCancelled(t.queue, phase)
	t.obs.TurnFinished(t.queue, OutcomeCancelled, t.jr.Latency(now), t.jr.Rec().TTFT)
	return nil
}

// cancelWaiting ends a cancelled turn that is not its chat's turn (its
// attempt holds no lease and has no record yet): never sent, it leaves the
// line with its final event and a journal record saying cancelled.
func (t *turn) cancelWaiting(ctx context.Context, nyt error) error {
	w := t.w
	t.line.WakeAfterDeadHeads(ctx, nyt)
	dctx, cancel := w.deliveryCtx(ctx)
	defer cancel()
	cr := *t.cx.Asked()
	cr.Phase = CancelPhaseWaiting
	t.cx.End()
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID, Otid: t.otid, MessageID: t.msg.MessageID,
		StopReason: StopReasonCancelled, Permanent: true}
	if _, err := w.replies.EmitAnswerOnce(dctx, t.msg.Conversation, ev); err != nil {
		return t.retryEarly(fmt.Errorf("write the cancelled event: %w", err))
	}
	rec := t.storedRecord(dctx)
	now := time.Now().UTC()
	rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: t.start.UTC(),
		End: now, Outcome: OutcomeCancelled})
	rec.Outcome, rec.StopReason, rec.FinishedAt, rec.Error, rec.Cancel = OutcomeCancelled, StopReasonCancelled, now, "", &cr
	t.jr.SetRecord(rec)
	if err := w.journal.Save(dctx, rec); err != nil {
		t.redisFailed()
		t.log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	if err := t.line.Leave(dctx); err != nil {
		t.redisFailed()
		t.log.Warn("could not take the cancelled turn out of its conversation's line", "error", err.Error())
	}
	t.writeResult(OutcomeCancelled, "", nil)
	t.log.Info("turn cancelled", "outcome", OutcomeCancelled, "phase", CancelPhaseWaiting, "by", cr.By)
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	w.turnCancelled(t.queue, CancelPhaseWaiting)
	t.obs.TurnFinished(t.queue, OutcomeCancelled, t.jr.Latency(now), 0)
	return nil // completed with the cancelled result: a normal ending, not a failure
}

// turnCancelled tells the observer of a cancelled turn (CancelObserver).
func (w *Worker) turnCancelled(queue, phase string) {
	if o, ok := w.obs.(CancelObserver); ok {
		o.TurnCancelled(queue, phase)
	}
}
