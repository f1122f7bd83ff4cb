package approval

import (
	"context"
	"fmt"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/record"
)

// Policy is what a message does when it reaches the head of its line while an approval
// request of its chat is unanswered (queue's ApprovalPolicy).
type Policy int

const (
	// Wait: the message waits until the request is answered or expires.
	Wait Policy = iota
	// Deny: the pending calls are denied (the user moved on), then the message waits for
	// that answer to run.
	Deny
	// Fail: the message fails at once.
	Fail
)

// Answerer enqueues the answers the worker makes itself: a request's expiry, scheduled at
// its time, and a policy's denial, at once (at zero).
type Answerer interface {
	// Answer answers every pending call of request requestTaskID with no, for reason,
	// with the cause record.AnswerExpired or record.AnswerMovedOn, to be run at at (zero: now).
	Answer(ctx context.Context, requestTaskID, reason, cause string, at time.Time) error
	// Close ends what Answer made, when the worker stops.
	Close() error
}

// Journal is what the part needs of the journal: other turns' records (the requesting
// turn's, which gets the answer; an answer turn's, to learn how it ended). queue's
// *Journal is one.
type Journal interface {
	Get(ctx context.Context, taskID string) (*record.TurnRecord, error)
	Save(ctx context.Context, rec *record.TurnRecord) error
}

// Config is what the worker's approvals need of the worker.
type Config struct {
	// Timeout: an unanswered request is denied this long after it was made.
	Timeout time.Duration
	Policy  Policy
	// ThreadConversation: a chat without a conversation of its own named talks to a Letta
	// conversation of its own (queue's ThreadConversation), not the agent's thread.
	ThreadConversation bool
	Answers            Answerer
	Journal            Journal
	// Wake wakes the turns that wait for the answer to request requestTaskID, now
	// answered, but the one in the answer's own line (key), which its release wakes.
	Wake func(ctx context.Context, requestTaskID, key string)
	// Observe, when set, is told of approvals: event is "requested", "answered" or
	// "expired", waited the time the request waited for its answer.
	Observe func(event string, waited time.Duration)
}

// Part is the worker's approvals: the pending requests and what the worker does with them.
// Each attempt has a Turn of it.
type Part struct {
	st  *Store
	cfg Config
}

// New is the worker's approvals over st.
func New(st *Store, cfg Config) *Part { return &Part{st: st, cfg: cfg} }

// Store is where the pending requests are kept.
func (a *Part) Store() *Store { return a.st }

// Close ends what the part's Answerer made. A nil Part has nothing to close.
func (a *Part) Close() error {
	if a == nil || a.cfg.Answers == nil {
		return nil
	}
	return a.cfg.Answers.Close()
}

// Scope names the Letta thread a message talks to, which a pending request blocks (see
// Pending.Scope): lettaConv is the conversation its payload names ("" for none), conv its
// chat.
func (a *Part) Scope(lettaConv string, conv record.Conversation) string {
	switch {
	case lettaConv != "" && lettaConv != agentclient.DefaultConversation:
		return "conv:" + lettaConv
	case lettaConv == "" && a.cfg.ThreadConversation:
		return "chat:" + conv.String()
	}
	return "agent"
}

func (a *Part) observe(event string, waited time.Duration) {
	if a.cfg.Observe != nil {
		a.cfg.Observe(event, waited)
	}
}

// scheduleExpiry schedules the answer that denies p's calls at p.ExpiresAt (a task with
// p's next answer id, which an answer that comes first replaces).
func (a *Part) scheduleExpiry(ctx context.Context, p *Pending) error {
	if len(p.Calls) == 0 {
		return nil
	}
	reason := fmt.Sprintf("nobody answered the approval request within %s", a.cfg.Timeout)
	if err := a.cfg.Answers.Answer(ctx, p.RequestTaskID, reason, record.AnswerExpired, p.ExpiresAt); err != nil {
		return fmt.Errorf("schedule the approval's expiry: %w", err)
	}
	return nil
}

// failedOn records on the pending request p that its answer turn answerTaskID gave up
// before its answer reached Letta: the next answer gets a task id of its own
// (Pending.NextAnswerTaskID) and a new expiry is scheduled (at the old time, or Timeout
// from now when that has passed: the failed answer may have been the expiry). Nothing
// changes (ok false) when p is answered or answerTaskID is not its current answer.
func (a *Part) failedOn(ctx context.Context, p *Pending, answerTaskID string) (ok bool, err error) {
	if p.AnsweredBy != "" || p.NextAnswerTaskID() != answerTaskID {
		return false, nil
	}
	p.FailedAnswers = append(p.FailedAnswers, answerTaskID)
	if now := time.Now(); !p.ExpiresAt.After(now) {
		p.ExpiresAt = now.Add(a.cfg.Timeout).UTC()
	}
	if err := a.st.Save(ctx, p); err != nil {
		return false, err
	}
	return true, a.scheduleExpiry(ctx, p)
}
