package ordering

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// Defaults of RetryPolicy.
const (
	DefaultRetryMin = 200 * time.Millisecond
	DefaultRetryMax = time.Second
	DefaultRetryCap = 10 * time.Second
)

// IsFailure is an asynq.Config.IsFailure predicate: a *NotYourTurnError
// (the task is put back to wait for its turn), a *MergedError and ErrDone
// are not failures, so they do not use up a retry. Anything else but nil
// is. Compose it with another predicate by and-ing them.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	return !IsNotYourTurn(err) && !IsMerged(err) && !errors.Is(err, ErrDone)
}

// RetryPolicy sets the put-back delay of a task that was not its turn.
// The next in line (position ≤ 1) waits uniform [Min, Max]; a task at
// position k waits k times that, at most Cap. Waiting tasks are woken
// through Wake by the turn before them as soon as it ends, so the delay is
// only the safety net; scaling it by position keeps a long line from
// churning through the queue (and keeps the woken task from landing behind
// hundreds of put-backs in Asynq's pending list).
type RetryPolicy struct {
	Min, Max, Cap time.Duration
	// Fallback for every other error, default asynq.DefaultRetryDelayFunc.
	Fallback asynq.RetryDelayFunc
}

// Func returns the asynq.RetryDelayFunc of p (zero fields: defaults).
func (p RetryPolicy) Func() asynq.RetryDelayFunc {
	if p.Min <= 0 {
		p.Min = DefaultRetryMin
	}
	if p.Max <= 0 {
		p.Max = max(DefaultRetryMax, p.Min)
	}
	if p.Max < p.Min {
		p.Max = p.Min
	}
	if p.Cap <= 0 {
		p.Cap = max(DefaultRetryCap, p.Max)
	}
	if p.Fallback == nil {
		p.Fallback = asynq.DefaultRetryDelayFunc
	}
	return p.delay
}

func (p RetryPolicy) delay(n int, err error, t *asynq.Task) time.Duration {
	var nyt *NotYourTurnError
	if !errors.As(err, &nyt) {
		return p.Fallback(n, err, t)
	}
	d := p.Min + rand.N(p.Max-p.Min+1)
	if k := nyt.Position; k > 1 {
		if d > p.Cap/time.Duration(k) {
			return p.Cap - rand.N(p.Cap/10+1)
		}
		d *= time.Duration(k)
	}
	return min(d, p.Cap)
}

// RetryDelay is an asynq.RetryDelayFunc with the default RetryPolicy: a
// *NotYourTurnError is retried after a jittered 200ms..1s times its
// position (at most 10s); anything else after asynq.DefaultRetryDelayFunc.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration { return defaultRetry(n, err, t) }

var defaultRetry = RetryPolicy{}.Func()

// InspectorAlive returns an AliveFunc backed by insp: a task that is not
// found (deleted, or its retention ended), completed or archived is not
// alive; pending, active, scheduled, retry and aggregating tasks are. It
// looks for the task in queue first, then in every other queue Asynq knows
// on that Redis (FindTask): one conversation's tasks may be in different
// queues (a client per queue, an answer in its request's queue), and a
// head waiting for its retry in another queue is alive.
func InspectorAlive(insp *asynq.Inspector, queue string) AliveFunc {
	return func(ctx context.Context, taskID string) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		info, err := FindTask(insp, queue, taskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			return false, nil
		case err != nil:
			return false, err
		}
		switch info.State {
		case asynq.TaskStateCompleted, asynq.TaskStateArchived:
			return false, nil
		}
		return true, nil
	}
}

// FindTask returns the task taskID: from queue when it is there, else from
// the first other queue Asynq knows (Inspector.Queues) that holds it, else
// an error wrapping asynq.ErrTaskNotFound. The line of a conversation knows
// its tasks' ids, not their queues; a task id is unique per queue, and
// lettaq's ids are unique per message, so it is in one queue at most.
func FindTask(insp *asynq.Inspector, queue, taskID string) (*asynq.TaskInfo, error) {
	info, err := insp.GetTaskInfo(queue, taskID)
	if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return info, err
	}
	qs, qerr := insp.Queues()
	if qerr != nil {
		return nil, qerr
	}
	for _, q := range qs {
		if q == queue {
			continue
		}
		info, err := insp.GetTaskInfo(q, taskID)
		if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
			continue
		}
		return info, err
	}
	return nil, fmt.Errorf("ordering: task %s in no queue: %w", taskID, asynq.ErrTaskNotFound)
}

// DefaultWakeWait bounds how long Wake waits for a task to be put back.
const DefaultWakeWait = 500 * time.Millisecond

// Wake makes taskID, the next head of key returned by Release, run now
// instead of at the end of its put-back delay (it looks for the task in
// queue first, then in the other queues: FindTask): if it waits in the retry or
// scheduled set, it is moved to pending (Inspector.RunTask). If it is still
// active (its NotYourTurn attempt has not been put back yet), Wake waits up
// to DefaultWakeWait for it to be put back, unless it holds key's lock
// meanwhile. Pending, archived, completed or missing tasks are left alone.
// Wake is best effort: the put-back delay runs the task anyway.
func (s *Sequencer) Wake(ctx context.Context, insp *asynq.Inspector, queue, key, taskID string) error {
	return Waking{Seq: s}.Wake(ctx, insp, queue, key, taskID)
}

// Waking says how a task is woken: Sequencer.Wake's way, and a caller's
// whose turns may also wait outside Asynq (parked) or whose tasks may be
// between two states (in no queue for a moment).
type Waking struct {
	// Wait bounds how long the task is looked for again (DefaultWakeWait
	// when zero).
	Wait time.Duration
	// Parked, when set, is asked first at each look: it wakes taskID when
	// it waits outside Asynq and says so (true: woken, nothing more to do).
	Parked func(ctx context.Context, taskID string) (bool, error)
	// MissingIsBetween: a task in no queue is between two states (parked
	// and not written yet, or being enqueued again) and is looked for
	// again; otherwise it is left alone.
	MissingIsBetween bool
	// Seq, when set, keeps an active task looked at unless it holds key's
	// line (its attempt may be put back into the retry set); nil leaves an
	// active task alone.
	Seq *Sequencer
}

// Wake makes taskID, which waits in key's line, run now: Parked first,
// then a retry or scheduled task is moved to pending; a task between two
// states or still active (see Waking's fields) is looked at again, backing
// off from 2ms to 50ms, for up to Wait. Pending, archived or completed
// tasks are left alone. When Wait ends with the task last seen waiting and
// its move to pending failed, that failure is returned (Redis failed it:
// the caller may try again), not nil.
func (w Waking) Wake(ctx context.Context, insp *asynq.Inspector, queue, key, taskID string) error {
	if taskID == "" {
		return nil
	}
	wait := w.Wait
	if wait == 0 {
		wait = DefaultWakeWait
	}
	deadline := time.Now().Add(wait)
	backoff := 2 * time.Millisecond
	var runErr error // the last move to pending that failed, while the task was seen waiting
	for {
		runErr = nil
		if w.Parked != nil {
			if ok, err := w.Parked(ctx, taskID); err != nil || ok {
				return err
			}
		}
		info, err := FindTask(insp, queue, taskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			if !w.MissingIsBetween {
				return nil
			}
		case err != nil:
			return err
		default:
			queue = info.Queue // (found in another queue: look there first next time)
			switch info.State {
			case asynq.TaskStateRetry, asynq.TaskStateScheduled:
				if runErr = insp.RunTask(queue, taskID); runErr == nil {
					return nil
				}
				// It moved meanwhile, or Redis failed the move: look again.
			case asynq.TaskStateActive:
				if w.Seq == nil {
					return nil
				}
				if held, _, err := w.Seq.Holder(ctx, key); err != nil || held == taskID {
					return err
				}
			default:
				return nil
			}
		}
		if time.Now().After(deadline) {
			if runErr != nil {
				return fmt.Errorf("ordering: wake %s: %w", taskID, runErr)
			}
			return nil
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}
