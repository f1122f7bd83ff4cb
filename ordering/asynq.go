package ordering

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// Default put-back delays of RetryDelay.
const (
	DefaultRetryMin = 200 * time.Millisecond
	DefaultRetryMax = time.Second
)

// IsFailure is an asynq.Config.IsFailure predicate: a *NotYourTurnError
// (the task is put back to wait for its turn), a *MergedError and ErrDone
// are not failures, so they do not use up a retry. Anything else but nil is.
// Compose it with another predicate by and-ing them.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	return !IsNotYourTurn(err) && !IsMerged(err) && !errors.Is(err, ErrDone)
}

// RetryDelay is an asynq.RetryDelayFunc: a *NotYourTurnError is retried
// after a jittered DefaultRetryMin..DefaultRetryMax; anything else after
// asynq.DefaultRetryDelayFunc.
func RetryDelay(n int, err error, t *asynq.Task) time.Duration {
	return retryDelay(n, err, t, DefaultRetryMin, DefaultRetryMax, asynq.DefaultRetryDelayFunc)
}

// RetryDelayFunc returns a RetryDelay with a put-back delay uniform in
// [min, max] and fallback (asynq.DefaultRetryDelayFunc when nil) for other
// errors.
func RetryDelayFunc(min, max time.Duration, fallback asynq.RetryDelayFunc) asynq.RetryDelayFunc {
	if fallback == nil {
		fallback = asynq.DefaultRetryDelayFunc
	}
	if max < min {
		max = min
	}
	return func(n int, err error, t *asynq.Task) time.Duration {
		return retryDelay(n, err, t, min, max, fallback)
	}
}

func retryDelay(n int, err error, t *asynq.Task, lo, hi time.Duration, fallback asynq.RetryDelayFunc) time.Duration {
	if !IsNotYourTurn(err) {
		return fallback(n, err, t)
	}
	if hi <= lo {
		return lo
	}
	return lo + rand.N(hi-lo+1)
}

// InspectorAlive returns an AliveFunc backed by insp for tasks of queue: a
// task that is not found (deleted, or its retention ended), completed or
// archived is not alive; pending, active, scheduled, retry and aggregating
// tasks are.
func InspectorAlive(insp *asynq.Inspector, queue string) AliveFunc {
	return func(ctx context.Context, taskID string) (bool, error) {
		if err := ctx.Err(); err != nil {
			return false, err
		}
		info, err := insp.GetTaskInfo(queue, taskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound), errors.Is(err, asynq.ErrQueueNotFound):
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

// DefaultWakeWait bounds how long Wake waits for a task to be put back.
const DefaultWakeWait = 500 * time.Millisecond

// Wake makes taskID, the next head of key returned by Release, run now
// instead of at the end of its put-back delay: if it waits in the retry or
// scheduled set, it is moved to pending (Inspector.RunTask). If it is still
// active (its NotYourTurn attempt has not been put back yet), Wake waits up
// to DefaultWakeWait for it to be put back, unless it holds key's lock
// meanwhile. Pending, archived, completed or missing tasks are left alone.
// Wake is best effort: the put-back delay runs the task anyway.
func (s *Sequencer) Wake(ctx context.Context, insp *asynq.Inspector, queue, key, taskID string) error {
	if taskID == "" {
		return nil
	}
	deadline := time.Now().Add(DefaultWakeWait)
	backoff := 2 * time.Millisecond
	for {
		info, err := insp.GetTaskInfo(queue, taskID)
		if err != nil {
			if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
				return nil
			}
			return err
		}
		switch info.State {
		case asynq.TaskStateRetry, asynq.TaskStateScheduled:
			if err := insp.RunTask(queue, taskID); err == nil {
				return nil
			}
			// It moved meanwhile: look again.
		case asynq.TaskStateActive:
			if held, _, err := s.Holder(ctx, key); err != nil || held == taskID {
				return err
			}
		default:
			return nil
		}
		if time.Now().After(deadline) {
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
