package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// The worker's side of approvals (see approval.go): a turn that ends with
// requires_approval records the request and schedules its expiry; an answer
// turn sends the decisions instead of text; a message turn meets its chat's
// unanswered request with the ApprovalPolicy.

// OutcomeAwaitingApproval ends an attempt of a message that waits for its
// chat's approval request to be answered (policy wait or deny): it is put
// back like a busy turn, without a retry used.
const OutcomeAwaitingApproval = "awaiting_approval"

// PhaseAwaitingApproval: the message waits for the answer to its chat's
// approval request.
const PhaseAwaitingApproval = "awaiting_approval"

// approvalWaitDelay is how often a waiting message looks again (the answer
// turn's release wakes it sooner).
const approvalWaitDelay = 5 * time.Second

// ApprovalObserver, when the worker's Observer implements it, is told of
// approvals: event is "requested", "answered" or "expired" (answered by
// the expiry), waited the time the request waited for its answer.
type ApprovalObserver interface {
	Approval(event string, waited time.Duration)
}

// answerer is the worker's Client for the answers it makes itself
// (expiries, policy denials), made on first use.
type answerer struct {
	once sync.Once
	c    *Client
	err  error
}

func (w *Worker) answerClient() (*Client, error) {
	a := &w.answerer
	a.once.Do(func() {
		o := w.cfg.Ordering
		if w.ord != nil {
			o.Sequencer = w.ord.seq
		}
		a.c, a.err = NewClient(ClientConfig{Redis: w.cfg.Redis, Budget: w.cfg.Budget, Replies: w.replies, Ordering: o})
	})
	return a.c, a.err
}

func (w *Worker) observeApproval(event string, waited time.Duration) {
	if o, ok := w.obs.(ApprovalObserver); ok {
		o.Approval(event, waited)
	}
}

// approvalScope names the Letta thread m talks to, which a pending
// approval blocks (see PendingApproval.Scope).
func (w *Worker) approvalScope(m Message) string {
	switch {
	case m.LettaConversationID != "" && m.LettaConversationID != agentclient.DefaultConversation:
		return "conv:" + m.LettaConversationID
	case m.LettaConversationID == "" && w.cfg.ThreadMode == ThreadConversation:
		return "chat:" + m.Conversation.String()
	}
	return "agent"
}

// approvalCalls lists every pending call of the turn's approval request.
func approvalCalls(tr agentclient.Transcript) []ToolEvent {
	var calls []ToolEvent
	seen := map[string]bool{}
	for _, s := range tr.PendingApprovals() {
		if s.ToolCallID != "" && seen[s.ToolCallID] {
			continue
		}
		seen[s.ToolCallID] = true
		calls = append(calls, ToolEvent{Name: s.ToolName, CallID: s.ToolCallID, Arguments: s.Arguments, Status: ToolStatusCall})
	}
	return calls
}

// requestApproval records the turn's approval request (before its event is
// written, so that an integration answering the event finds it) and
// schedules its expiry. It returns the event's approval field.
func (t *turn) requestApproval(ctx context.Context, log *slog.Logger, calls []ToolEvent) (*ApprovalEvent, error) {
	now := time.Now()
	p := &PendingApproval{RequestTaskID: t.taskID, Otid: t.otid, RunID: t.rec.RunID, AgentID: t.msg.AgentID,
		Conversation: t.msg.Conversation, LettaConversationID: t.msg.LettaConversationID, Queue: t.queue,
		Scope: t.w.approvalScope(t.msg),
		Calls: calls, RequestedAt: now.UTC(), ExpiresAt: now.Add(t.w.cfg.ApprovalTimeout).UTC()}
	if old, err := t.w.approvals.get(ctx, t.taskID); err == nil {
		p.RequestedAt, p.ExpiresAt = old.RequestedAt, old.ExpiresAt // a retried delivery keeps the first
	}
	if err := t.w.approvals.save(ctx, p); err != nil {
		return nil, err
	}
	if len(calls) > 0 {
		c, err := t.w.answerClient()
		if err == nil {
			reason := fmt.Sprintf("nobody answered the approval request within %s", t.w.cfg.ApprovalTimeout)
			_, err = c.AnswerApproval(ctx, ApprovalReply{Request: t.taskID, Approve: false, Reason: reason,
				cause: AnswerExpired, processAt: p.ExpiresAt})
		}
		if err != nil {
			return nil, fmt.Errorf("schedule the approval's expiry: %w", err)
		}
	}
	t.mu.Lock()
	t.rec.Approval = approvalRecordOf(p)
	t.mu.Unlock()
	log.Info("approval requested", "calls", len(calls), "expires_at", p.ExpiresAt.Format(time.RFC3339))
	t.w.observeApproval("requested", 0)
	return &ApprovalEvent{RequestTaskID: t.taskID, Calls: calls, ExpiresAt: p.ExpiresAt}, nil
}

// answerTurn prepares an answer turn: the request must still wait for this
// answer. end is true when the turn ended here (err is its result).
func (t *turn) answerTurn(ctx context.Context) (approvals []agentclient.ApprovalAnswer, err error, end bool) {
	a := t.msg.Approval
	p, err := t.w.approvals.get(ctx, a.RequestTaskID)
	if errors.Is(err, ErrNoApproval) {
		return nil, t.fail(ctx, t.log, "cannot answer: "+err.Error(), ""), true
	}
	if err != nil {
		return nil, t.retryEarly(err), true
	}
	if p.AnsweredBy != "" && p.AnsweredBy != t.taskID {
		return nil, t.fail(ctx, t.log, fmt.Sprintf("approval request %s was already answered by %s", p.RequestTaskID, p.AnsweredBy), ""), true
	}
	for _, d := range a.Decisions {
		approvals = append(approvals, agentclient.ApprovalAnswer{ToolCallID: d.ToolCallID, Approve: d.Approve, Reason: d.Reason})
	}
	if t.attempt().N == 1 {
		t.log.Info("answering approval request", "request_task_id", p.RequestTaskID, "decision", a.summary(), "cause", a.Cause)
	}
	return approvals, nil, false
}

// answered records, once the answer turn ended, that the request is
// answered, with the time it waited for a human.
func (t *turn) answered(ctx context.Context, log *slog.Logger) {
	a := t.msg.Approval
	if a == nil {
		return
	}
	p, err := t.w.approvals.get(ctx, a.RequestTaskID)
	if err != nil {
		log.Warn("could not read the answered approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	if p.AnsweredBy == t.taskID {
		return // a retried delivery
	}
	now := time.Now()
	if err := t.w.approvals.answered(ctx, p, t.taskID, a, now); err != nil {
		t.redisFailed()
		log.Warn("could not record the answer of the approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	ar := approvalRecordOf(p)
	// The human's wait ends when the answer came (was enqueued).
	waited := max(t.msg.EnqueuedAt.Sub(p.RequestedAt), 0)
	ar.Waited = waited
	t.mu.Lock()
	t.rec.Approval = ar
	t.mu.Unlock()
	t.journalAnswer(ctx, p.RequestTaskID, ar)
	event := "answered"
	if a.Cause == AnswerExpired {
		event = "expired"
	}
	log.Info("approval "+event, "request_task_id", a.RequestTaskID, "decision", a.summary(), "cause", a.Cause,
		"waited", waited.Round(time.Millisecond).String())
	t.w.observeApproval(event, waited)
}

// approvalGate meets the chat's unanswered approval request, if any, before
// a message turn sends. end is true when the attempt ends here.
func (t *turn) approvalGate(ctx context.Context) (err error, end bool) {
	pending, perr := t.pre.pending()
	p, err := t.w.approvals.pendingOf(ctx, pending, perr)
	if err != nil {
		return t.retryEarly(err), true
	}
	if p == nil || p.RequestTaskID == t.taskID {
		return nil, false
	}
	log := t.log.With(slog.String("request_task_id", p.RequestTaskID))
	switch t.w.cfg.ApprovalPolicy {
	case ApprovalError:
		return t.fail(ctx, log, fmt.Sprintf("the agent is waiting for the answer to approval request %s; answer it before sending new messages (LETTAQ_APPROVAL_POLICY=error)", p.RequestTaskID), ""), true
	case ApprovalDeny:
		c, err := t.w.answerClient()
		if err == nil {
			_, err = c.AnswerApproval(ctx, ApprovalReply{Request: p.RequestTaskID, Approve: false,
				Reason: "the user moved on and sent a new message instead of answering", cause: AnswerMovedOn})
		}
		if err != nil {
			return t.retryEarly(fmt.Errorf("deny the pending approval: %w", err)), true
		}
		log.Info("pending approval denied: a new message came (LETTAQ_APPROVAL_POLICY=deny)")
	}
	return t.awaitApproval(ctx, log, p), true
}

// awaitApproval puts the message back until its chat's request is
// answered (the answer turn is ahead of it in the line).
func (t *turn) awaitApproval(ctx context.Context, log *slog.Logger, p *PendingApproval) error {
	t.mu.Lock()
	first := len(t.rec.Attempts) < 2 || t.rec.Attempts[len(t.rec.Attempts)-2].Outcome != OutcomeAwaitingApproval
	t.attempt().Outcome = OutcomeAwaitingApproval
	t.attempt().Error = "waiting for the answer to approval request " + p.RequestTaskID
	t.attempt().End = time.Now().UTC()
	t.mu.Unlock()
	if first {
		t.emit(ReplyEvent{Type: EventPhase, Phase: PhaseAwaitingApproval,
			Approval: &ApprovalEvent{RequestTaskID: p.RequestTaskID, ExpiresAt: p.ExpiresAt}})
	}
	t.endProgress(ctx)
	if err := t.save(ctx); err != nil {
		log.Warn("could not journal the attempt", "error", err.Error())
	}
	log.Info("the message waits for the answer to the chat's approval request", "retry_in", approvalWaitDelay.String())
	t.w.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	return &BusyError{Delay: approvalWaitDelay, Reason: "waiting for the answer to approval request " + p.RequestTaskID}
}

// imageRejected: a 400 refusing a message with images is the server
// failing to fetch one; the error names the URLs.
func (t *turn) imageRejected(d continuation.Decision, reason string) string {
	if len(t.msg.Images) == 0 || agentclient.StatusCode(d.Err) != 400 {
		return reason
	}
	if urls := imageURLs(t.msg.Images); urls != "" {
		return "the server could not use the message's images (" + urls + "): " + reason
	}
	return reason
}

// ApprovalRecord is what the journal keeps of an approval (TurnRecord.Approval).
type ApprovalRecord struct {
	RequestTaskID string    `json:"request_task_id"`
	Calls         []string  `json:"calls,omitempty"` // "name (call id)"
	RequestedAt   time.Time `json:"requested_at,omitzero"`
	ExpiresAt     time.Time `json:"expires_at,omitzero"`
	AnsweredBy    string    `json:"answered_by,omitempty"`
	AnsweredAt    time.Time `json:"answered_at,omitzero"`
	// Decision: approved, denied or mixed; Cause: user, expired, moved_on.
	Decision string `json:"decision,omitempty"`
	Cause    string `json:"cause,omitempty"`
	// Waited is the time the request waited for its answer (a human).
	Waited time.Duration `json:"waited_ns,omitempty"`
}

func approvalRecordOf(p *PendingApproval) *ApprovalRecord {
	r := &ApprovalRecord{RequestTaskID: p.RequestTaskID, RequestedAt: p.RequestedAt, ExpiresAt: p.ExpiresAt,
		AnsweredBy: p.AnsweredBy, AnsweredAt: p.AnsweredAt, Decision: p.Decision, Cause: p.Cause}
	for _, c := range p.Calls {
		r.Calls = append(r.Calls, c.Name+" ("+c.CallID+")")
	}
	if !p.AnsweredAt.IsZero() {
		r.Waited = max(p.AnsweredAt.Sub(p.RequestedAt), 0)
	}
	return r
}

// journalAnswer writes the answer into the requesting turn's journal.
func (t *turn) journalAnswer(ctx context.Context, requestTaskID string, ar *ApprovalRecord) {
	rec, err := t.w.journal.Get(ctx, requestTaskID)
	if err != nil {
		t.log.Debug("no journal of the requesting turn", "request_task_id", requestTaskID, "error", err.Error())
		return
	}
	rec.Approval = ar
	if err := t.w.journal.Save(ctx, rec); err != nil {
		t.log.Warn("could not journal the answer on the requesting turn", "request_task_id", requestTaskID, "error", err.Error())
	}
}
