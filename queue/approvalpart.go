package queue

import (
	"context"
	"sync"
	"time"

	"github.com/lettaq/lettaq/queue/internal/approval"
)

// The worker's side of approvals: the approval part (queue/internal/approval)
// decides; this file gives it what it needs of the worker and of the
// attempt, and applies its gate: a message that meets its chat's unanswered
// request waits (parks) or fails.

// ApprovalObserver, when the worker's Observer implements it, is told of
// approvals: event is "requested", "answered" or "expired" (answered by
// the expiry), waited the time the request waited for its answer.
type ApprovalObserver interface {
	Approval(event string, waited time.Duration)
}

// answerer is the worker's Client for the answers it makes itself
// (expiries, policy denials), made on first use: the approval part's
// approval.Answerer.
type answerer struct {
	w    *Worker
	once sync.Once
	c    *Client
	err  error
}

func (a *answerer) client() (*Client, error) {
	a.once.Do(func() {
		w := a.w
		o := w.cfg.Ordering
		if w.ord != nil {
			o.Sequencer = w.ord.seq
		}
		cfg := ClientConfig{Redis: w.cfg.Redis, Budget: w.cfg.Budget, Replies: w.replies, Ordering: o}
		if len(w.layouts) == 1 && w.layouts[0].N() > 1 { // the answers go to their request's shard, under its layout
			cfg.Queue, cfg.Shards = w.layouts[0].BaseQueue(), w.layouts[0].N()
		}
		a.c, a.err = NewClient(cfg)
	})
	return a.c, a.err
}

// Answer enqueues the answer that denies every pending call of request
// requestTaskID, with cause, at at (zero: at once).
func (a *answerer) Answer(ctx context.Context, requestTaskID, reason, cause string, at time.Time) error {
	c, err := a.client()
	if err == nil {
		_, err = c.AnswerApproval(ctx, ApprovalReply{Request: requestTaskID, Approve: false, Reason: reason,
			cause: cause, processAt: at})
	}
	return err
}

// Close closes the client, if one was made.
func (a *answerer) Close() error {
	if a.c == nil {
		return nil
	}
	return a.c.Close()
}

// newApprovalPart is the worker's approvals (queue/internal/approval), once
// its replies, journal, ordering and thread mode are set.
func newApprovalPart(w *Worker) *approval.Part {
	pol := approval.Wait
	switch w.cfg.Approvals.Policy {
	case ApprovalDeny:
		pol = approval.Deny
	case ApprovalError:
		pol = approval.Fail
	}
	return approval.New(newApprovals(w.replies), approval.Config{Timeout: w.cfg.Approvals.Timeout, Policy: pol,
		ThreadConversation: w.cfg.ThreadMode == ThreadConversation, Answers: &answerer{w: w}, Journal: w.journal,
		Wake: func(ctx context.Context, requestTaskID, key string) {
			w.lines.WakeApprovalWaiters(ctx, requestTaskID, key) // set just after the approvals
		},
		Observe: func(event string, waited time.Duration) {
			if o, ok := w.obs.(ApprovalObserver); ok {
				o.Approval(event, waited)
			}
		}})
}
