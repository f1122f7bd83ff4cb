package attempt

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hibiken/asynq"
)

// What an attempt's handler tells Asynq: nil (done), a permanent error
// (SkipRetry), or one of the errors below, which RetryDelay and IsFailure
// (the worker's asynq.Config) read; no caller of the queue sees them.

// ErrShutdown is the cause of the handlers' context when the worker shuts
// down with turns in flight.
var ErrShutdown = errors.New("lettaq: worker shutting down")

// retryAfterError asks for the task to be retried after Delay (RetryDelay
// reads it).
type retryAfterError struct {
	Delay  time.Duration
	Reason string
	Err    error
}

func (e *retryAfterError) Error() string {
	s := e.Reason
	if s == "" && e.Err != nil {
		s = e.Err.Error()
	} else if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return fmt.Sprintf("%s (retry in %v)", s, e.Delay)
}

func (e *retryAfterError) Unwrap() error { return e.Err }

// interruptedError ends an attempt that was interrupted (worker shutdown,
// deadline): the turn is not finished, and the next attempt continues it.
type interruptedError struct {
	Reason string
	Err    error
}

func (e *interruptedError) Error() string {
	return "lettaq: turn interrupted: " + e.Reason
}

func (e *interruptedError) Unwrap() error { return e.Err }

// RetryDelay is the asynq.RetryDelayFunc for turns: the delay a
// *retryAfterError asks for (none asked: the backoff below), a short one
// after an interruption, else
// exponential backoff from 1s (doubling per retry, capped at 1 minute,
// ±20% jitter).
func RetryDelay(n int, err error, _ *asynq.Task) time.Duration {
	var ra *retryAfterError
	if errors.As(err, &ra) && ra.Delay > 0 {
		return ra.Delay
	}
	var be *busyError
	if errors.As(err, &be) {
		return max(be.Delay, 0)
	}
	var ie *interruptedError
	if errors.As(err, &ie) || errors.Is(err, context.Canceled) {
		return 100 * time.Millisecond
	}
	d := retryBackoff(n)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// IsFailure is the asynq IsFailure predicate for turns: an attempt
// interrupted by a shutdown (its context canceled) does not count as a
// failed try.
func IsFailure(err error) bool {
	if err == nil {
		return false
	}
	var be *busyError
	if errors.As(err, &be) {
		return false // the thread was busy: the turn only waits
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, ErrShutdown)
}

// busyError puts a turn back while its Letta thread is busy with another
// run: no failure (IsFailure says false, so Asynq does not count a retry),
// retried after Delay (RetryDelay reads it).
type busyError struct {
	Delay  time.Duration
	Reason string
	Err    error
}

func (e *busyError) Error() string {
	return fmt.Sprintf("lettaq: %s (retry in %v)", e.Reason, e.Delay)
}

func (e *busyError) Unwrap() error { return e.Err }

// retryBackoff is the least a turn waits after a failed attempt: 1 s
// doubling per retry already made (retried), capped at 1 minute, as the
// package documentation promises. With the default MaxRetry the retries
// then span about 20 minutes of waits (TestTransientRetriesBackOff prints
// it), so that a Letta outage or restart of minutes loses no message,
// where retries a second apart were spent in 25 s.
func retryBackoff(retried int) time.Duration {
	d := time.Second
	for i := 0; i < retried && d < time.Minute; i++ {
		d *= 2
	}
	return min(d, time.Minute)
}
