package attempt

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/record"
)

// approvalWaitDelay is how often a waiting message that could not park
// looks again (a parked one is woken by the answer: ParkApproval).
const approvalWaitDelay = 5 * time.Second

// Waiting ends an attempt that waits instead of running: behind its
// chat's open approval request, or behind the turn ahead of it in its line.
// Such an attempt journals the wait (one record.Wait per thing waited behind),
// tells the chat once, and parks or is put back; the rest of its end is
// the completer's.
type Waiting struct{ *completer }

// Waiting is the end of t as an attempt that waits.
func (t *Pipeline) Waiting() Waiting { return Waiting{t.End} }

// awaitApproval makes the message wait until its chat's request is
// answered: parked (see parkApproval), with or without ordering, or put
// back every approvalWaitDelay when it could not park.
func (c Waiting) awaitApproval(ctx context.Context, log *slog.Logger, p *approval.Pending) error {
	if err := c.ParkApproval(ctx, log, p); err != nil {
		return err
	}
	if c.noRetryLeft(&busyError{}) {
		return c.GiveUp("waiting for the answer to approval request " + p.RequestTaskID)
	}
	c.jr.Lock()
	first := len(c.jr.Rec().Attempts) < 2 || c.jr.Rec().Attempts[len(c.jr.Rec().Attempts)-2].Outcome != record.OutcomeAwaitingApproval
	c.jr.Current().Outcome = record.OutcomeAwaitingApproval
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
	c.obs.attemptFinished(c.Queue, "busy", time.Since(c.Start))
	return &busyError{Delay: approvalWaitDelay, Reason: "waiting for the answer to approval request " + p.RequestTaskID}
}

// awaitingPhase tells the chat that the message waits for the answer to
// p: the awaiting_approval phase, a progress event (queued, like the run's).
func (c Waiting) awaitingPhase(p *approval.Pending) {
	c.progress.Push(record.ReplyEvent{Type: record.EventPhase, Phase: record.PhaseAwaitingApproval, TaskID: c.TaskID, Otid: c.Otid,
		MessageID: c.Msg.MessageID, Approval: &record.ApprovalEvent{RequestTaskID: p.RequestTaskID, ExpiresAt: p.ExpiresAt}})
}

// recordWait journals that the turn waits behind behind (one record.Wait per
// thing waited behind: nothing is written when the open wait is the same,
// and first is false then). rec is the turn's record as read (nil: it is
// read here).
func (c Waiting) recordWait(ctx context.Context, rec *record.TurnRecord, behind, reason string) (first bool) {
	if rec == nil {
		r, err := c.w.Journal.Get(ctx, c.TaskID)
		switch {
		case errors.Is(err, journal.ErrNotFound):
			r = &record.TurnRecord{TaskID: c.TaskID, Otid: c.Otid, AgentID: c.Msg.AgentID, Conversation: c.Msg.Conversation,
				MessageID: c.Msg.MessageID, Queue: c.Queue, EnqueuedAt: c.Msg.EnqueuedAt}
		case err != nil:
			c.log.Debug("could not read the journal to record the wait", "error", err.Error())
			return true
		}
		rec = r
	}
	if !addWait(rec, behind, reason, time.Now().UTC()) {
		return false
	}
	if err := c.w.Journal.Save(ctx, rec); err != nil {
		c.log.Debug("could not journal the wait", "error", err.Error())
	}
	return true
}

// logWait logs the turn's wait: Info when it starts waiting behind
// something new, Debug for a look again.
func (c Waiting) logWait(first bool, msg string, attrs ...any) {
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelInfo
	}
	c.log.Log(context.Background(), lvl, msg, attrs...)
}

// parkNotYourTurn parks an attempt that is not its conversation's turn
// (err: a *ordering.NotYourTurnError): its journal record gets the wait;
// nil when it could not park (it is put back as before).
func (c Waiting) parkNotYourTurn(ctx context.Context, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ahead, perr := c.line.ParkBehindTurn(rctx, err)
	if perr == nil {
		return nil
	}
	c.obs.attemptFinished(c.Queue, "busy", time.Since(c.Start))
	first := c.recordWait(rctx, nil, ahead.Head, ahead.Reason)
	c.logWait(first, "the turn waits for the turn ahead of it", "behind", ahead.Head, "position", ahead.Position,
		"recheck_in", c.w.Lines.Recheck().String())
	return perr
}

// ParkApproval parks a message that waits for the answer to its chat's
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
func (c Waiting) ParkApproval(ctx context.Context, log *slog.Logger, p *approval.Pending) error {
	behind := "approval request " + p.RequestTaskID
	reason := "waiting for the answer to approval request " + p.RequestTaskID
	perr := c.line.Park(ctx, behind, reason)
	if perr == nil {
		return nil
	}
	c.obs.attemptFinished(c.Queue, "busy", time.Since(c.Start))
	if err := c.line.NoteApprovalWaiter(ctx, p.RequestTaskID); err != nil {
		log.Debug("could not note the waiter on its approval request", "error", err.Error())
	}
	if now, err := c.w.Approvals.Store().Get(ctx, p.RequestTaskID); errors.Is(err, approval.ErrNoRequest) || (err == nil && now.AnsweredBy != "") {
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
	c.logWait(first, "the message waits for the answer to the chat's approval request", "recheck_in", c.w.Lines.Recheck().String())
	return perr
}
