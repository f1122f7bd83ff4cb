package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lettaq/lettaq/agentclient"
)

// The worker's side of approvals (see approval.go): a turn that ends with
// requires_approval records the request and schedules its expiry; an answer
// turn sends the decisions instead of text; a message turn meets its chat's
// unanswered request with the ApprovalPolicy.

// approvalWaitDelay is how often a waiting message that could not park
// looks again (a parked one is woken by the answer: parkApproval).
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
// approval blocks (see pendingApproval.Scope).
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
	p := &pendingApproval{RequestTaskID: t.taskID, Otid: t.otid, RunID: t.rec.RunID, AgentID: t.msg.AgentID,
		Conversation: t.msg.Conversation, LettaConversationID: t.msg.LettaConversationID, Queue: t.queue,
		Scope: t.w.approvalScope(t.msg),
		Calls: calls, RequestedAt: now.UTC(), ExpiresAt: now.Add(t.w.cfg.ApprovalTimeout).UTC()}
	if old, err := t.w.approvals.get(ctx, t.taskID); err == nil && old.RequestTaskID == t.taskID {
		// A retried delivery keeps the first's times and failed answers;
		// a request answered meanwhile (its event reached the chat though
		// its attempt heard an error) stays answered: it is not made
		// pending again, and no expiry is due.
		if old.AnsweredBy != "" {
			log.Info("approval request already answered: a retried delivery leaves it so", "answered_by", old.AnsweredBy)
			t.mu.Lock()
			t.rec.Approval = approvalRecordOf(old)
			t.mu.Unlock()
			return &ApprovalEvent{RequestTaskID: t.taskID, Calls: old.Calls, ExpiresAt: old.ExpiresAt}, nil
		}
		p.RequestedAt, p.ExpiresAt, p.FailedAnswers = old.RequestedAt, old.ExpiresAt, old.FailedAnswers
	}
	if err := t.w.approvals.save(ctx, p); err != nil {
		return nil, err
	}
	if err := t.w.scheduleExpiry(ctx, p); err != nil {
		return nil, err
	}
	t.mu.Lock()
	t.rec.Approval = approvalRecordOf(p)
	t.mu.Unlock()
	log.Info("approval requested", "calls", len(calls), "expires_at", p.ExpiresAt.Format(time.RFC3339))
	t.w.observeApproval("requested", 0)
	return &ApprovalEvent{RequestTaskID: t.taskID, Calls: calls, ExpiresAt: p.ExpiresAt}, nil
}

// scheduleExpiry schedules the answer that denies p's calls at p.ExpiresAt
// (a task with p's next answer id, which an answer that comes first
// replaces).
func (w *Worker) scheduleExpiry(ctx context.Context, p *pendingApproval) error {
	if len(p.Calls) == 0 {
		return nil
	}
	c, err := w.answerClient()
	if err == nil {
		reason := fmt.Sprintf("nobody answered the approval request within %s", w.cfg.ApprovalTimeout)
		_, err = c.AnswerApproval(ctx, ApprovalReply{Request: p.RequestTaskID, Approve: false, Reason: reason,
			cause: AnswerExpired, processAt: p.ExpiresAt})
	}
	if err != nil {
		return fmt.Errorf("schedule the approval's expiry: %w", err)
	}
	return nil
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
	if p.AnsweredBy != "" {
		log.Warn("approval request answered by another turn: left so", "request_task_id", a.RequestTaskID, "answered_by", p.AnsweredBy)
		return
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
	t.w.wakeApprovalWaiters(ctx, p.RequestTaskID, t.key)
	event := "answered"
	if a.Cause == AnswerExpired {
		event = "expired"
	}
	log.Info("approval "+event, "request_task_id", a.RequestTaskID, "decision", a.summary(), "cause", a.Cause,
		"waited", waited.Round(time.Millisecond).String())
	t.w.observeApproval(event, waited)
}

// answerEnded records on its request how an answer turn ended (failed:
// with a permanent error). The request is answered when the answer reached
// Letta: the turn answered or asked again, or it failed with a run (Letta
// took the approval message and ran it). An answer turn that failed with no
// run gave up before Letta took its answer (Letta refused it, or was down
// for every retry): at Letta the thread still waits for an answer, so the
// request stays pending and can be answered again (answerFailed).
func (t *turn) answerEnded(ctx context.Context, log *slog.Logger, failed bool) {
	if t.msg.Approval == nil {
		return
	}
	t.mu.Lock()
	reached := t.rec != nil && t.rec.RunID != ""
	t.mu.Unlock()
	if failed && !reached {
		t.answerFailed(ctx, log)
		return
	}
	t.answered(ctx, log)
}

// answerFailed records that the answer turn gave up before its answer
// reached Letta (see answerEnded).
func (t *turn) answerFailed(ctx context.Context, log *slog.Logger) {
	a := t.msg.Approval
	p, err := t.w.approvals.get(ctx, a.RequestTaskID)
	if err != nil {
		if !errors.Is(err, ErrNoApproval) {
			t.redisFailed()
		}
		log.Warn("could not read the approval request of the failed answer", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	if ok, err := t.w.answerFailedOn(ctx, p, t.taskID); err != nil {
		t.redisFailed()
		log.Warn("could not record the failed answer on its approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	} else if !ok {
		return
	}
	log.Info("the answer did not reach Letta: the approval request stays pending, to be answered again",
		"request_task_id", a.RequestTaskID, "next_answer_task_id", p.answerTaskID(), "expires_at", p.ExpiresAt.Format(time.RFC3339))
}

// answerFailedOn records on the pending request p that its answer turn
// answerTaskID gave up before its answer reached Letta: the next answer
// gets a task id of its own (pendingApproval.answerTaskID) and a new expiry
// is scheduled (at the old time, or ApprovalTimeout from now when that has
// passed: the failed answer may have been the expiry). Nothing changes (ok
// false) when p is answered or answerTaskID is not its current answer.
func (w *Worker) answerFailedOn(ctx context.Context, p *pendingApproval, answerTaskID string) (ok bool, err error) {
	if p.AnsweredBy != "" || p.answerTaskID() != answerTaskID {
		return false, nil
	}
	p.FailedAnswers = append(p.FailedAnswers, answerTaskID)
	if now := time.Now(); !p.ExpiresAt.After(now) {
		p.ExpiresAt = now.Add(w.cfg.ApprovalTimeout).UTC()
	}
	if err := w.approvals.save(ctx, p); err != nil {
		return false, err
	}
	return true, w.scheduleExpiry(ctx, p)
}

// settleAnswered looks at how the current answer turn of the pending
// request p ended, by its journal, in case the request was not told (a
// worker that died between the answer's final event and the request's
// record, or a write that failed there): an answer that reached Letta
// marks p answered (true: the message goes on); one that gave up before
// records the failed answer (the message keeps waiting for a new one).
func (t *turn) settleAnswered(ctx context.Context, p *pendingApproval) bool {
	id := p.answerTaskID()
	rec, err := t.w.journal.Get(ctx, id)
	if err != nil {
		return false // not run yet (or unreadable: the message waits, and looks again)
	}
	log := t.log.With(slog.String("request_task_id", p.RequestTaskID), slog.String("answer_task_id", id))
	switch {
	case rec.Outcome == OutcomeAnswered || rec.Outcome == OutcomeApprovalRequired || (rec.Outcome == OutcomeFailed && rec.RunID != ""):
		if err := t.w.approvals.answered(ctx, p, id, nil, rec.FinishedAt); err != nil {
			t.redisFailed()
			log.Warn("could not record the answer of the approval request", "error", err.Error())
			return false
		}
		log.Warn("the approval request's answer had ended without the request being told: recorded as answered now", "outcome", rec.Outcome)
		t.w.wakeApprovalWaiters(ctx, p.RequestTaskID, t.key)
		return true
	case rec.Outcome == OutcomeFailed:
		if _, err := t.w.answerFailedOn(ctx, p, id); err != nil {
			t.redisFailed()
			log.Warn("could not record the failed answer on its approval request", "error", err.Error())
		}
	}
	return false
}

// approvalGate meets the chat's unanswered approval request, if any, before
// a message turn sends. end is true when the attempt ends here.
func (t *turn) approvalGate(ctx context.Context) (err error, end bool) {
	pending, perr := t.pre.Pending()
	p, err := t.w.approvals.pendingOf(ctx, pending, perr)
	if err != nil {
		return t.retryEarly(err), true
	}
	if p == nil || p.RequestTaskID == t.taskID || t.settleAnswered(ctx, p) {
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

// awaitApproval makes the message wait until its chat's request is
// answered: parked (see parkApproval), with or without ordering, or put
// back every approvalWaitDelay when it could not park.
func (t *turn) awaitApproval(ctx context.Context, log *slog.Logger, p *pendingApproval) error {
	if err := t.parkApproval(ctx, log, p); err != nil {
		return err
	}
	if t.outOfRetries(&busyError{}) {
		return t.giveUp("waiting for the answer to approval request " + p.RequestTaskID)
	}
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
	t.progress.End(ctx)
	if err := t.save(ctx); err != nil {
		log.Warn("could not journal the attempt", "error", err.Error())
	}
	log.Info("the message waits for the answer to the chat's approval request", "retry_in", approvalWaitDelay.String())
	t.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	return &busyError{Delay: approvalWaitDelay, Reason: "waiting for the answer to approval request " + p.RequestTaskID}
}

func approvalRecordOf(p *pendingApproval) *ApprovalRecord {
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
