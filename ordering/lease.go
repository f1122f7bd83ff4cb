package ordering

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lease is a held turn: the lock of one key, renewed every RenewEvery by a
// re-armed timer (no goroutine waits between renewals) until Release. If
// renewal fails (the lock was taken over or expired while Redis was
// unreachable), Lost is closed: the turn must stop.
type Lease struct {
	s                          *Sequencer
	key, taskID, holder, token string

	lostCtx  context.Context // done when the lease is lost
	markLost context.CancelFunc

	renewCtx    context.Context // cancelled by Release: aborts a renewal in flight
	cancelRenew context.CancelFunc

	mu       sync.Mutex // guards timer and stopped; inflight.Add happens under it
	timer    *time.Timer
	stopped  bool
	inflight sync.WaitGroup
	lastOK   time.Time
	leaseMs  string
	stopOnce sync.Once
}

func (s *Sequencer) newLease(key, taskID, holder, token string) *Lease {
	l := &Lease{s: s, key: key, taskID: taskID, holder: holder, token: token,
		lastOK: time.Now(), leaseMs: strconv.FormatInt(s.cfg.Lease.Milliseconds(), 10)}
	l.lostCtx, l.markLost = context.WithCancel(context.Background())
	l.renewCtx, l.cancelRenew = context.WithCancel(context.Background())
	l.mu.Lock()
	l.timer = time.AfterFunc(s.cfg.RenewEvery, l.renew)
	l.mu.Unlock()
	return l
}

// Key returns the conversation key.
func (l *Lease) Key() string { return l.key }

// TaskID returns the task holding the lease.
func (l *Lease) TaskID() string { return l.taskID }

// Token is unique to this Acquire (the lock's value).
func (l *Lease) Token() string { return l.token }

// Lost is closed when the lease is lost before Release.
func (l *Lease) Lost() <-chan struct{} { return l.lostCtx.Done() }

// Context returns a child of parent that is cancelled, with cause
// ErrLeaseLost, when the lease is lost. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	stop := context.AfterFunc(l.lostCtx, func() { cancel(ErrLeaseLost) })
	return ctx, func() { stop(); cancel(context.Canceled) }
}

// renew runs on the timer: one compare-and-extend, then re-arm.
func (l *Lease) renew() {
	l.mu.Lock()
	if l.stopped {
		l.mu.Unlock()
		return
	}
	l.inflight.Add(1)
	l.mu.Unlock()
	defer l.inflight.Done()

	every := l.s.cfg.RenewEvery
	cctx, cancel := context.WithTimeout(l.renewCtx, every)
	n, err := extendLua.Run(cctx, l.s.rdb, []string{l.s.lockKey(l.key)}, l.token, l.leaseMs).Int()
	cancel()
	switch {
	case l.renewCtx.Err() != nil:
		return
	case err == nil && n == 1:
		l.lastOK = time.Now()
	case err == nil:
		// Someone else holds the lock, or it expired.
		l.markLost()
		return
	case time.Since(l.lastOK) >= l.s.cfg.Lease:
		// Redis unreachable for a whole lease: the lock may be gone.
		l.markLost()
		return
	}
	l.mu.Lock()
	if !l.stopped {
		l.timer.Reset(every)
	}
	l.mu.Unlock()
}

// stopRenewal stops the timer and waits for a renewal in flight.
func (l *Lease) stopRenewal() {
	l.stopOnce.Do(func() {
		l.mu.Lock()
		l.stopped = true
		l.timer.Stop()
		l.mu.Unlock()
		l.cancelRenew()
		l.inflight.Wait()
	})
}

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
	d := "0"
	if done {
		d = "1"
	}
	res, err := releaseLua.Run(ctx, l.s.rdb,
		[]string{l.s.lineKey(l.key), l.s.lockKey(l.key), l.s.doneKey(l.key, l.taskID)},
		l.taskID, l.token, d, l.s.cfg.DoneTTL.Milliseconds()).Slice()
	if err != nil {
		return "", fmt.Errorf("ordering: release %s on %q: %w", l.taskID, l.key, err)
	}
	return str(res, 0), nil
}
