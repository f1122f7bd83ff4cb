package queue

import (
	"context"
	"log/slog"

	"github.com/lettaq/lettaq/queue/internal/approval"
)

// The turn as its parts see it: its cancel (cancel.Run, cancel.Attempt) and
// its approvals (approval.Attempt).

// cancelRun is the turn as its cancel's view of the attempt (cancel.Run,
// cancel.Attempt): (*cancelRun)(t).
type cancelRun turn

func (r *cancelRun) RunID() string { return r.ids.RunIDNow() }

func (r *cancelRun) Log() *slog.Logger { return r.log }

// ReadCancel reads the turn's cancel record.
func (r *cancelRun) ReadCancel(ctx context.Context) ([]byte, bool, error) {
	return r.w.replies.st.GetCancel(ctx, r.TaskID)
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
		_, err = t.w.client.CancelRuns(ctx, t.Msg.AgentID, []string{runID})
	} else {
		_, err = t.w.client.CancelConversation(ctx, conv, t.Msg.AgentID)
	}
	return err
}

// approvalAttempt is what the attempt's approvals need of it
// (approval.Attempt): its journal record's run id and approval, and the
// note of a Redis failure.
type approvalAttempt turn

func (a *approvalAttempt) RunID() string {
	t := (*turn)(a)
	t.jr.Lock()
	defer t.jr.Unlock()
	if t.jr.Rec() == nil {
		return ""
	}
	return t.jr.Rec().RunID
}

func (a *approvalAttempt) SetApproval(r *ApprovalRecord) {
	t := (*turn)(a)
	t.jr.Lock()
	t.jr.Rec().Approval = r
	t.jr.Unlock()
}

func (a *approvalAttempt) RedisFailed() { (*turn)(a).RedisFailed() }

// newApprovalTurn is the attempt's approvals (turn.ap), once its task,
// message and line are known.
func newApprovalTurn(t *turn) approval.Turn {
	id := approval.Ident{TaskID: t.TaskID, Otid: t.Otid, Queue: t.Queue, Key: t.line.Key(), AgentID: t.Msg.AgentID,
		Conversation: t.Msg.Conversation, LettaConversationID: t.Msg.LettaConversationID,
		EnqueuedAt: t.Msg.EnqueuedAt, Answer: t.Msg.Approval}
	return t.w.approvals.Turn(id, (*approvalAttempt)(t), t.log)
}
