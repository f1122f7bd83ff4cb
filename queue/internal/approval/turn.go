package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/record"
)

// Attempt is what a Turn needs of the attempt it belongs to.
type Attempt interface {
	// RunID is the run's id as the attempt's journal record has it ("" before Letta
	// named it, or before the record was read).
	RunID() string
	// SetApproval puts the approval on the attempt's journal record.
	SetApproval(*record.ApprovalRecord)
	// RedisFailed notes that a Redis write failed (the attempt ends once Redis answers
	// again).
	RedisFailed()
}

// Ident is who an attempt is, as its approvals need it: its task and its message.
type Ident struct {
	TaskID, Otid, Queue string
	// Key is the attempt's line ("" without ordering).
	Key                 string
	AgentID             string
	Conversation        record.Conversation
	LettaConversationID string
	// EnqueuedAt: when the message (an answer: when the answer came) was enqueued.
	EnqueuedAt time.Time
	// Answer: the message is the answer to a request (nil: a message of the chat).
	Answer *record.Answer
}

// Turn is one attempt's side of approvals: it asks for one (Ask), meets its chat's open
// request or checks its answer (Gate), and records how an answer turn ended (Answered,
// Ended). The zero Turn belongs to no answer: Answered and Ended do nothing.
type Turn struct {
	p   *Part
	att Attempt
	id  Ident
	log *slog.Logger // the attempt's: every line carries task_id, otid and run_id
}

// Turn is the approvals of one attempt.
func (a *Part) Turn(id Ident, att Attempt, log *slog.Logger) Turn {
	return Turn{p: a, att: att, id: id, log: log}
}

// Ask records the turn's approval request (before its event is written, so that an
// integration answering the event finds it) and schedules its expiry. It returns the
// event's approval field.
func (t *Turn) Ask(ctx context.Context, log *slog.Logger, calls []record.ToolEvent) (*record.ApprovalEvent, error) {
	now := time.Now()
	id := &t.id
	p := &Pending{RequestTaskID: id.TaskID, Otid: id.Otid, RunID: t.att.RunID(), AgentID: id.AgentID,
		Conversation: id.Conversation, LettaConversationID: id.LettaConversationID, Queue: id.Queue,
		Scope: t.p.Scope(id.LettaConversationID, id.Conversation),
		Calls: calls, RequestedAt: now.UTC(), ExpiresAt: now.Add(t.p.cfg.Timeout).UTC()}
	if old, err := t.p.st.Get(ctx, id.TaskID); err == nil && old.RequestTaskID == id.TaskID {
		// A retried delivery keeps the first's times and failed answers;
		// a request answered meanwhile (its event reached the chat though
		// its attempt heard an error) stays answered: it is not made
		// pending again, and no expiry is due.
		if old.AnsweredBy != "" {
			log.Info("approval request already answered: a retried delivery leaves it so", "answered_by", old.AnsweredBy)
			t.att.SetApproval(old.Record())
			return &record.ApprovalEvent{RequestTaskID: id.TaskID, Calls: old.Calls, ExpiresAt: old.ExpiresAt}, nil
		}
		p.RequestedAt, p.ExpiresAt, p.FailedAnswers = old.RequestedAt, old.ExpiresAt, old.FailedAnswers
	}
	if err := t.p.st.Save(ctx, p); err != nil {
		return nil, err
	}
	if err := t.p.scheduleExpiry(ctx, p); err != nil {
		return nil, err
	}
	t.att.SetApproval(p.Record())
	log.Info("approval requested", "calls", len(calls), "expires_at", p.ExpiresAt.Format(time.RFC3339))
	t.p.observe("requested", 0)
	return &record.ApprovalEvent{RequestTaskID: id.TaskID, Calls: calls, ExpiresAt: p.ExpiresAt}, nil
}

// Gate is the approval gate's verdict on an attempt (Turn.Gate): the zero Gate lets a
// message go on; the attempt applies the others.
type Gate struct {
	// Answers: an answer turn goes on and sends these.
	Answers []agentclient.ApprovalAnswer
	// Open is the chat's unanswered request the message met (with Wait, or Fail).
	Open *Pending
	// Wait: the message waits for Open's answer.
	Wait bool
	// Fail: the attempt fails (permanently) with this reason.
	Fail string
	// Err: a read or a write failed; the attempt is retried early.
	Err error
}

// Reads is what the gate needs of the attempt's start reads (store.StartReads): the task id
// of the request its chat waits on ("" for none).
type Reads interface {
	Pending() (string, error)
}

// Gate is the approval gate of the attempt, before it sends. An answer turn's request must
// still wait for this answer: it goes on with the decisions. A message meets its chat's
// unanswered request, if any (its pending key read with the attempt's start, reads), as
// the Policy says. first: the attempt is the turn's first.
func (t *Turn) Gate(ctx context.Context, reads Reads, first bool) Gate {
	if t.id.Answer != nil {
		return t.check(ctx, first)
	}
	pending, perr := reads.Pending()
	p, err := t.p.st.pendingOf(ctx, pending, perr)
	if err != nil {
		return Gate{Err: err}
	}
	if p == nil || p.RequestTaskID == t.id.TaskID || t.settle(ctx, p) {
		return Gate{}
	}
	switch t.p.cfg.Policy {
	case Fail:
		return Gate{Open: p, Fail: fmt.Sprintf("the agent is waiting for the answer to approval request %s; answer it before sending new messages (LETTAQ_APPROVAL_POLICY=error)", p.RequestTaskID)}
	case Deny:
		err := t.p.cfg.Answers.Answer(ctx, p.RequestTaskID, "the user moved on and sent a new message instead of answering", record.AnswerMovedOn, time.Time{})
		if err != nil {
			return Gate{Err: fmt.Errorf("deny the pending approval: %w", err)}
		}
		t.log.Info("pending approval denied: a new message came (LETTAQ_APPROVAL_POLICY=deny)", "request_task_id", p.RequestTaskID)
	}
	return Gate{Open: p, Wait: true}
}

// check is Gate of an answer turn: the request must still wait for this answer.
func (t *Turn) check(ctx context.Context, first bool) Gate {
	a := t.id.Answer
	p, err := t.p.st.Get(ctx, a.RequestTaskID)
	if errors.Is(err, ErrNoRequest) {
		return Gate{Fail: "cannot answer: " + err.Error()}
	}
	if err != nil {
		return Gate{Err: err}
	}
	if p.AnsweredBy != "" && p.AnsweredBy != t.id.TaskID {
		return Gate{Fail: fmt.Sprintf("approval request %s was already answered by %s", p.RequestTaskID, p.AnsweredBy)}
	}
	var answers []agentclient.ApprovalAnswer
	for _, d := range a.Decisions {
		answers = append(answers, agentclient.ApprovalAnswer{ToolCallID: d.ToolCallID, Approve: d.Approve, Reason: d.Reason})
	}
	if first {
		t.log.Info("answering approval request", "request_task_id", p.RequestTaskID, "decision", Summary(a.Decisions), "cause", a.Cause)
	}
	return Gate{Answers: answers}
}

// Answered records, once an answer turn ended, that the request is answered, with the
// time it waited for a human; it wakes the turns that waited for the answer.
func (t *Turn) Answered(ctx context.Context, log *slog.Logger) {
	a := t.id.Answer
	if a == nil {
		return
	}
	p, err := t.p.st.Get(ctx, a.RequestTaskID)
	if err != nil {
		log.Warn("could not read the answered approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	if p.AnsweredBy == t.id.TaskID {
		return // a retried delivery
	}
	if p.AnsweredBy != "" {
		log.Warn("approval request answered by another turn: left so", "request_task_id", a.RequestTaskID, "answered_by", p.AnsweredBy)
		return
	}
	now := time.Now()
	if err := t.p.st.Answered(ctx, p, t.id.TaskID, a, now); err != nil {
		t.att.RedisFailed()
		log.Warn("could not record the answer of the approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	ar := p.Record()
	// The human's wait ends when the answer came (was enqueued).
	waited := max(t.id.EnqueuedAt.Sub(p.RequestedAt), 0)
	ar.Waited = waited
	t.att.SetApproval(ar)
	t.journalAnswer(ctx, p.RequestTaskID, ar)
	t.p.cfg.Wake(ctx, p.RequestTaskID, t.id.Key)
	event := "answered"
	if a.Cause == record.AnswerExpired {
		event = "expired"
	}
	log.Info("approval "+event, "request_task_id", a.RequestTaskID, "decision", Summary(a.Decisions), "cause", a.Cause,
		"waited", waited.Round(time.Millisecond).String())
	t.p.observe(event, waited)
}

// Ended records on its request how an answer turn ended (failed: with a permanent
// error). The request is answered when the answer reached Letta: the turn answered or
// asked again, or it failed with a run (Letta took the approval message and ran it). An
// answer turn that failed with no run gave up before Letta took its answer (Letta refused
// it, or was down for every retry): at Letta the thread still waits for an answer, so the
// request stays pending and can be answered again (failed).
func (t *Turn) Ended(ctx context.Context, log *slog.Logger, failed bool) {
	if t.id.Answer == nil {
		return
	}
	if failed && t.att.RunID() == "" {
		t.failed(ctx, log)
		return
	}
	t.Answered(ctx, log)
}

// failed records that the answer turn gave up before its answer reached Letta (see
// Ended).
func (t *Turn) failed(ctx context.Context, log *slog.Logger) {
	a := t.id.Answer
	p, err := t.p.st.Get(ctx, a.RequestTaskID)
	if err != nil {
		if !errors.Is(err, ErrNoRequest) {
			t.att.RedisFailed()
		}
		log.Warn("could not read the approval request of the failed answer", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	}
	if ok, err := t.p.failedOn(ctx, p, t.id.TaskID); err != nil {
		t.att.RedisFailed()
		log.Warn("could not record the failed answer on its approval request", "request_task_id", a.RequestTaskID, "error", err.Error())
		return
	} else if !ok {
		return
	}
	log.Info("the answer did not reach Letta: the approval request stays pending, to be answered again",
		"request_task_id", a.RequestTaskID, "next_answer_task_id", p.NextAnswerTaskID(), "expires_at", p.ExpiresAt.Format(time.RFC3339))
}

// settle looks at how the current answer turn of the pending request p ended, by its
// journal, in case the request was not told (a worker that died between the answer's
// final event and the request's record, or a write that failed there): an answer that
// reached Letta marks p answered (true: the message goes on); one that gave up before
// records the failed answer (the message keeps waiting for a new one).
func (t *Turn) settle(ctx context.Context, p *Pending) bool {
	id := p.NextAnswerTaskID()
	rec, err := t.p.cfg.Journal.Get(ctx, id)
	if err != nil {
		return false // not run yet (or unreadable: the message waits, and looks again)
	}
	log := t.log.With(slog.String("request_task_id", p.RequestTaskID), slog.String("answer_task_id", id))
	switch {
	case rec.Outcome == record.OutcomeAnswered || rec.Outcome == record.OutcomeApprovalRequired || (rec.Outcome == record.OutcomeFailed && rec.RunID != ""):
		if err := t.p.st.Answered(ctx, p, id, nil, rec.FinishedAt); err != nil {
			t.att.RedisFailed()
			log.Warn("could not record the answer of the approval request", "error", err.Error())
			return false
		}
		log.Warn("the approval request's answer had ended without the request being told: recorded as answered now", "outcome", rec.Outcome)
		t.p.cfg.Wake(ctx, p.RequestTaskID, t.id.Key)
		return true
	case rec.Outcome == record.OutcomeFailed:
		if _, err := t.p.failedOn(ctx, p, id); err != nil {
			t.att.RedisFailed()
			log.Warn("could not record the failed answer on its approval request", "error", err.Error())
		}
	}
	return false
}

// journalAnswer writes the answer into the requesting turn's journal.
func (t *Turn) journalAnswer(ctx context.Context, requestTaskID string, ar *record.ApprovalRecord) {
	rec, err := t.p.cfg.Journal.Get(ctx, requestTaskID)
	if err != nil {
		t.log.Debug("no journal of the requesting turn", "request_task_id", requestTaskID, "error", err.Error())
		return
	}
	rec.Approval = ar
	if err := t.p.cfg.Journal.Save(ctx, rec); err != nil {
		t.log.Warn("could not journal the answer on the requesting turn", "request_task_id", requestTaskID, "error", err.Error())
	}
}
