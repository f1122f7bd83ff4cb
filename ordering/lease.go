package ordering

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"
)

// Lease is a held turn: the lock of one key, renewed until Release by its
// Sequencer together with every other lease it holds (see renewer: one
// round trip per renewal tick, whatever the number of leases; no goroutine
// per lease). If renewal fails (the lock was taken over or expired, or
// Redis stayed unreachable for a whole lease), Lost is closed: the turn
// must stop.
type Lease struct {
	s                          *Sequencer
	key, taskID, holder, token string
	lock                       string // the lock's Redis key

	// The lease's loss: what Lost and Context hand out, made only when
	// asked for (a waiting turn holds no channel or context tree for it).
	lostMu sync.Mutex
	lost   bool
	// stopped: released, or lost: no longer renewed (guarded by
	// s.renew.mu; beside lost, in what would be padding).
	stopped bool
	lostCh  chan struct{} // Lost's channel, closed on loss
	onLost  []*lostHook   // AfterLost's functions (Context's among them)

	// Renewal state, guarded by s.renew.mu.
	due    time.Time // when the lock should be extended next
	lastOK time.Time // when the last successful extension (or the acquire) was sent
	round  *round    // the renewal in flight that includes this lease, if any
}

func (s *Sequencer) newLease(key, taskID, holder, token string) *Lease {
	l := &Lease{s: s, key: key, taskID: taskID, holder: holder, token: token, lock: s.lockKey(key)}
	s.renew.add(l, time.Now())
	return l
}

// Key returns the conversation key.
func (l *Lease) Key() string { return l.key }

// TaskID returns the task holding the lease.
func (l *Lease) TaskID() string { return l.taskID }

// Token is unique to this Acquire (the lock's value).
func (l *Lease) Token() string { return l.token }

// Lost is closed when the lease is lost before Release.
func (l *Lease) Lost() <-chan struct{} {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lostCh == nil {
		l.lostCh = make(chan struct{})
		if l.lost {
			close(l.lostCh)
		}
	}
	return l.lostCh
}

// Context returns a child of parent that is cancelled, with cause
// ErrLeaseLost, when the lease is lost. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := l.AfterLost(func() { cancel(ErrLeaseLost) })
	return ctx, func() {
		stop()
		cancel(context.Canceled)
	}
}

// AfterLost arranges for f to be called once when the lease is lost: on
// the goroutine that finds the loss (so f must not block; a context's
// CancelFunc is the intended f), or before AfterLost returns when it is
// lost already. stop unregisters f; it reports whether it did so before f
// was called. Unlike Context it makes no context: a turn can cancel a
// context it has anyway (its work context) instead of holding a second one
// for the lease while it waits.
func (l *Lease) AfterLost(f func()) (stop func() bool) {
	l.lostMu.Lock()
	if l.lost {
		l.lostMu.Unlock()
		f()
		return func() bool { return false }
	}
	h := &lostHook{f: f}
	l.onLost = append(l.onLost, h)
	l.lostMu.Unlock()
	return func() bool {
		l.lostMu.Lock()
		defer l.lostMu.Unlock()
		for i, o := range l.onLost {
			if o == h {
				l.onLost = slices.Delete(l.onLost, i, i+1)
				return true
			}
		}
		return false
	}
}

// Err returns ErrLeaseLost once the lease is lost, nil before.
func (l *Lease) Err() error {
	l.lostMu.Lock()
	defer l.lostMu.Unlock()
	if l.lost {
		return ErrLeaseLost
	}
	return nil
}

// lostHook is a function to call when the lease is lost (AfterLost).
type lostHook struct{ f func() }

// markLost closes Lost and calls the AfterLost functions (which cancels
// every Context of the lease).
func (l *Lease) markLost() {
	l.lostMu.Lock()
	if l.lost {
		l.lostMu.Unlock()
		return
	}
	l.lost = true
	if l.lostCh != nil {
		close(l.lostCh)
	}
	cancels := l.onLost
	l.onLost = nil
	l.lostMu.Unlock()
	for _, h := range cancels {
		h.f()
	}
}

// stopRenewal takes the lease out of its Sequencer's renewal and waits for
// a renewal in flight that includes it (at most its timeout,
// Config.RenewEvery; it is cut short when every lease in it is released).
// After it returns, nothing renews the lock and Lost no longer fires.
func (l *Lease) stopRenewal() { l.s.renew.remove(l) }

// Release ends the turn: it stops the renewal (and waits for one in
// flight), deletes the lock if it is still ours, and, when done (the
// turn finished: answered, failed for good, archived), takes the task out
// of the line. When !done (the turn is still running at the agent and will
// be retried) the task keeps its place at the head, so that no later
// message overtakes it. It returns the head of the line now ("" when
// empty): with done, the task to wake (asynq Inspector.RunTask, see Wake);
// with !done, the task itself. Release may be called more than once.
func (l *Lease) Release(ctx context.Context, done bool) (next string, err error) {
	l.stopRenewal()
	res, err := releaseLua.Call(ctx, l.s.rdb, l.releaseArgs(done, "")).Slice()
	if err != nil {
		return "", fmt.Errorf("ordering: release %s on %q: %w", l.taskID, l.key, err)
	}
	return str(res, 0), nil
}
