package ordering

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Lease is a held turn: the lock of one key, renewed in the background by
// one goroutine until Release. If renewal fails (the lock was taken over or
// expired while Redis was unreachable), Lost is closed: the turn must stop.
type Lease struct {
	s                          *Sequencer
	key, taskID, holder, token string

	lost     chan struct{}
	lostOnce sync.Once

	stopOnce sync.Once
	cancel   context.CancelFunc
	exited   chan struct{}
}

func (s *Sequencer) newLease(key, taskID, holder, token string) *Lease {
	ctx, cancel := context.WithCancel(context.Background())
	l := &Lease{s: s, key: key, taskID: taskID, holder: holder, token: token,
		lost: make(chan struct{}), cancel: cancel, exited: make(chan struct{})}
	go l.renew(ctx)
	return l
}

// Key returns the conversation key.
func (l *Lease) Key() string { return l.key }

// TaskID returns the task holding the lease.
func (l *Lease) TaskID() string { return l.taskID }

// Token is unique to this Acquire (the lock's value).
func (l *Lease) Token() string { return l.token }

// Lost is closed when the lease is lost before Release.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

// Context returns a child of parent that is cancelled, with cause
// ErrLeaseLost, when the lease is lost. Call cancel when done.
func (l *Lease) Context(parent context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(parent)
	go func() {
		select {
		case <-l.lost:
			cancel(ErrLeaseLost)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { cancel(context.Canceled) }
}

func (l *Lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

func (l *Lease) renew(ctx context.Context) {
	defer close(l.exited)
	every := l.s.cfg.RenewEvery
	leaseMs := strconv.FormatInt(l.s.cfg.Lease.Milliseconds(), 10)
	t := time.NewTicker(every)
	defer t.Stop()
	lastOK := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, every)
		n, err := extendLua.Run(cctx, l.s.rdb, []string{l.s.lockKey(l.key)}, l.token, leaseMs).Int()
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && n == 1:
			lastOK = time.Now()
		case err == nil:
			// Someone else holds the lock, or it expired.
			l.markLost()
			return
		case time.Since(lastOK) >= l.s.cfg.Lease:
			// Redis unreachable for a whole lease: the lock may be gone.
			l.markLost()
			return
		}
	}
}

// Release ends the turn: it stops the renewal (and waits for its
// goroutine), deletes the lock if it is still ours, and, when done (the
// turn finished: answered, failed for good, archived), takes the task out
// of the line. When !done (the turn is still running at the agent and will
// be retried) the task keeps its place at the head, so that no later
// message overtakes it. It returns the head of the line now ("" when
// empty): with done, the task to wake (asynq Inspector.RunTask, see Wake);
// with !done, the task itself. Release may be called more than once.
func (l *Lease) Release(ctx context.Context, done bool) (next string, err error) {
	l.stopOnce.Do(func() { l.cancel(); <-l.exited })
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
