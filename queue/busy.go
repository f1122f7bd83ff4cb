package queue

import (
	"fmt"
	"time"
)

// busyError puts a turn back while its Letta thread is busy with another
// run: no failure (isFailure says false, so Asynq does not count a retry),
// retried after Delay (retryDelay reads it).
type busyError struct {
	Delay  time.Duration
	Reason string
	Err    error
}

func (e *busyError) Error() string {
	return fmt.Sprintf("lettaq: %s (retry in %v)", e.Reason, e.Delay)
}

func (e *busyError) Unwrap() error { return e.Err }

// busyRetry is the delay before a turn refused as busy tries again: the
// server's Retry-After, else a backoff of 1 s doubling per busy attempt in
// a row, up to 16 s.
func busyRetry(retryAfter time.Duration, busyInARow int) time.Duration {
	if retryAfter > 0 {
		return retryAfter
	}
	d := time.Second
	for i := 1; i < busyInARow && d < 16*time.Second; i++ {
		d *= 2
	}
	return min(d, 16*time.Second)
}
