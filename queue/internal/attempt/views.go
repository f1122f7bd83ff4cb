package attempt

import (
	"context"
	"log/slog"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/lettaq/lettaq/queue/internal/approval"
)

// The turn as its parts see it: its cancel (cancel.Run, cancel.Attempt) and
// its approvals (approval.Attempt).

// cancelRun is the turn as its cancel's view of the attempt (cancel.Run,
// cancel.Attempt): (*cancelRun)(t).
type cancelRun Pipeline

func (r *cancelRun) RunID() string { return r.IDs.runIDNow() }

func (r *cancelRun) Log() *slog.Logger { return r.Logger }

// ReadCancel reads the turn's cancel record.
func (r *cancelRun) ReadCancel(ctx context.Context) ([]byte, bool, error) {
	return r.W.Stores.Replies.GetCancel(ctx, r.TaskID)
}

// NoteCancel notes the cancel the channel published (cancel.Running).
func (r *cancelRun) NoteCancel(b []byte, readErr error) {
	t := (*Pipeline)(r)
	if readErr != nil {
		t.Logger.Warn("could not read the turn's cancel record", "error", readErr.Error())
		b = nil // the publish says there is one
	}
	t.Cx.NoteJSON(b, r)
}

// CancelRun asks Letta to cancel the turn's run: the conversation's cancel,
// or on the agent endpoints the agent's cancel of this run.
func (r *cancelRun) CancelRun(conv, runID string) error {
	t := (*Pipeline)(r)
	ctx, cancel := context.WithTimeout(t.detached(), t.W.Cfg.Budget.RequestTimeout)
	defer cancel()
	var err error
	if conv == "" {
		_, err = t.W.Letta.CancelRuns(ctx, t.Msg.AgentID, []string{runID})
	} else {
		_, err = t.W.Letta.CancelConversation(ctx, conv, t.Msg.AgentID)
	}
	return err
}

// approvalAttempt is what the attempt's approvals need of it
// (approval.Attempt): its journal record's run id and approval, and the
// note of a Redis failure (recordWriter.RedisFailed, the pipeline's).
type approvalAttempt Pipeline

func (a *approvalAttempt) RunID() string {
	t := (*Pipeline)(a)
	t.Jr.Lock()
	defer t.Jr.Unlock()
	if t.Jr.Rec() == nil {
		return ""
	}
	return t.Jr.Rec().RunID
}

func (a *approvalAttempt) SetApproval(r *record.ApprovalRecord) {
	t := (*Pipeline)(a)
	t.Jr.Lock()
	t.Jr.Rec().Approval = r
	t.Jr.Unlock()
}

// newApprovalTurn is the attempt's approvals (turn.ap), once its task,
// message and line are known.
func newApprovalTurn(t *Pipeline) approval.Turn {
	id := approval.Ident{TaskID: t.TaskID, Otid: t.Otid, Queue: t.Queue, Key: t.Line.Key(), AgentID: t.Msg.AgentID,
		Conversation: t.Msg.Conversation, LettaConversationID: t.Msg.LettaConversationID,
		EnqueuedAt: t.Msg.EnqueuedAt, Answer: t.Msg.Approval}
	return t.W.Approvals.Turn(id, (*approvalAttempt)(t), t.Logger)
}

// AsCancel is the turn as its cancel's view of the attempt (the worker's
// running turns hold it: Parts.Cancels).
func (t *Pipeline) AsCancel() *cancelRun { return (*cancelRun)(t) }
