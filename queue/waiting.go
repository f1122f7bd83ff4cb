package queue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/attempt"
)

// waiting ends an attempt that waits instead of running: behind its
// chat's open approval request, or behind the turn ahead of it in its line.
// Such an attempt journals the wait (one Wait per thing waited behind),
// tells the chat once, and parks or is put back; the rest of its end is
// the completer's.
type waiting struct{ *completer }

// awaitApproval makes the message wait until its chat's request is
// answered: parked (see parkApproval), with or without ordering, or put
// back every approvalWaitDelay when it could not park.
func (c waiting) awaitApproval(ctx context.Context, log *slog.Logger, p *approval.Pending) error {
	if err := c.parkApproval(ctx, log, p); err != nil {
		return err
	}
	if c.noRetryLeft(&attempt.BusyError{}) {
		return c.giveUp("waiting for the answer to approval request " + p.RequestTaskID)
	}
	c.jr.Lock()
	first := len(c.jr.Rec().Attempts) < 2 || c.jr.Rec().Attempts[len(c.jr.Rec().Attempts)-2].Outcome != OutcomeAwaitingApproval
	c.jr.Current().Outcome = OutcomeAwaitingApproval
	c.jr.Current().Error = "waiting for the answer to approval request " + p.RequestTaskID
	c.jr.Current().End = time.Now().UTC()
	c.jr.Unlock()
	if first {
		c.awaitingPhase(p)
	}
	c.progress.End(ctx)
	if err := c.Save(ctx); err != nil {
		log.Warn("could not journal the attempt", "error", err.Error())
	}
	log.Info("the message waits for the answer to the chat's approval request", "retry_in", approvalWaitDelay.String())
	c.obs.AttemptFinished(c.queue, "busy", time.Since(c.start))
	return &attempt.BusyError{Delay: approvalWaitDelay, Reason: "waiting for the answer to approval request " + p.RequestTaskID}
}

// awaitingPhase tells the chat that the message waits for the answer to
// p: the awaiting_approval phase, a progress event (queued, like the run's).
func (c waiting) awaitingPhase(p *approval.Pending) {
	c.progress.Push(ReplyEvent{Type: EventPhase, Phase: PhaseAwaitingApproval, TaskID: c.taskID, Otid: c.otid,
		MessageID: c.msg.MessageID, Approval: &ApprovalEvent{RequestTaskID: p.RequestTaskID, ExpiresAt: p.ExpiresAt}})
}

// recordWait journals that the turn waits behind behind (one Wait per
// thing waited behind: nothing is written when the open wait is the same,
// and first is false then). rec is the turn's record as read (nil: it is
// read here).
func (c waiting) recordWait(ctx context.Context, rec *TurnRecord, behind, reason string) (first bool) {
	if rec == nil {
		r, err := c.w.journal.Get(ctx, c.taskID)
		switch {
		case errors.Is(err, ErrNotFound):
			r = &TurnRecord{TaskID: c.taskID, Otid: c.otid, AgentID: c.msg.AgentID, Conversation: c.msg.Conversation,
				MessageID: c.msg.MessageID, Queue: c.queue, EnqueuedAt: c.msg.EnqueuedAt}
		case err != nil:
			c.log.Debug("could not read the journal to record the wait", "error", err.Error())
			return true
		}
		rec = r
	}
	if !addWait(rec, behind, reason, time.Now().UTC()) {
		return false
	}
	if err := c.w.journal.Save(ctx, rec); err != nil {
		c.log.Debug("could not journal the wait", "error", err.Error())
	}
	return true
}

// logWait logs the turn's wait: Info when it starts waiting behind
// something new, Debug for a look again.
func (c waiting) logWait(first bool, msg string, attrs ...any) {
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelInfo
	}
	c.log.Log(context.Background(), lvl, msg, attrs...)
}

// parkNotYourTurn parks an attempt that is not its conversation's turn
// (err: a *ordering.NotYourTurnError): its journal record gets the wait;
// nil when it could not park (it is put back as before).
func (c waiting) parkNotYourTurn(ctx context.Context, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ahead, perr := c.line.ParkBehindTurn(rctx, err)
	if perr == nil {
		return nil
	}
	c.obs.AttemptFinished(c.queue, "busy", time.Since(c.start))
	first := c.recordWait(rctx, nil, ahead.Head, ahead.Reason)
	c.logWait(first, "the turn waits for the turn ahead of it", "behind", ahead.Head, "position", ahead.Position,
		"recheck_in", c.w.lines.Recheck().String())
	return perr
}

// parkApproval parks a message that waits for the answer to its chat's
// approval request p, with or without ordering: the attempt is no attempt
// (the record is left as it was, with one wait behind the request), the
// awaiting_approval phase is emitted when the wait begins. nil when it
// could not park.
//
// The message is noted as a waiter of the request, which the answer (or
// the expiry) wakes (line.Lines.WakeApprovalWaiters). An answer recorded between the
// gate's read and that note would miss it: the request is read again after
// the note, and a message whose request was answered meanwhile wakes
// itself (its record is marked woken: its re-enqueue makes it pending).
func (c waiting) parkApproval(ctx context.Context, log *slog.Logger, p *approval.Pending) error {
	behind := "approval request " + p.RequestTaskID
	reason := "waiting for the answer to approval request " + p.RequestTaskID
	perr := c.line.Park(ctx, behind, reason)
	if perr == nil {
		return nil
	}
	c.obs.AttemptFinished(c.queue, "busy", time.Since(c.start))
	if err := c.line.NoteApprovalWaiter(ctx, p.RequestTaskID); err != nil {
		log.Debug("could not note the waiter on its approval request", "error", err.Error())
	}
	if now, err := c.w.approvals.Store().Get(ctx, p.RequestTaskID); errors.Is(err, ErrNoApproval) || (err == nil && now.AnsweredBy != "") {
		if err := c.line.WakeParked(ctx); err != nil {
			log.Debug("could not wake the message whose approval request was answered meanwhile", "error", err.Error())
		}
	}
	c.jr.Lock()
	c.jr.Rec().Attempts = c.jr.Rec().Attempts[:c.jr.Index()]
	if len(c.jr.Rec().Attempts) == 0 {
		c.jr.Rec().FirstStartedAt = time.Time{}
	}
	first := addWait(c.jr.Rec(), behind, reason, time.Now().UTC())
	c.jr.Unlock()
	if first {
		c.awaitingPhase(p)
	}
	c.progress.End(ctx)
	if err := c.Save(ctx); err != nil { // (replaces the save prepare queued)
		log.Warn("could not journal the wait", "error", err.Error())
	}
	c.logWait(first, "the message waits for the answer to the chat's approval request", "recheck_in", c.w.lines.Recheck().String())
	return perr
}
