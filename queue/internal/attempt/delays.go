package attempt

import (
	"fmt"
	"time"
)

// refusalWait is the delay before a refused turn sends again: the
// server's Retry-After up to MaxServerRetryAfter (0 without one: the
// usual backoff), and a note when the server asked for more.
func refusalWait(retryAfter time.Duration) (delay time.Duration, note string) {
	if retryAfter > MaxServerRetryAfter {
		return MaxServerRetryAfter, fmt.Sprintf("Letta asked to wait %s (Retry-After), more than the %s cap: sending again after %s",
			retryAfter, MaxServerRetryAfter, MaxServerRetryAfter)
	}
	return retryAfter, ""
}

// backoffDelay is the delay before the next attempt of a turn refused
// without a Retry-After (a model rate limit, a refusal naming no delay): 2 s
// doubling per retry already made (retried), up to MaxServerRetryAfter. (A
// *retryAfterError with no delay would be retried at once; Asynq keeps a
// retry's time in whole seconds, so 2 s is at least 1.)
func backoffDelay(retried int) time.Duration {
	d := 2 * time.Second
	for i := 0; i < retried && d < MaxServerRetryAfter; i++ {
		d *= 2
	}
	return min(d, MaxServerRetryAfter)
}

// MaxServerRetryAfter caps the wait a refusal's Retry-After asks for
// (continuation.Refused: a deploy's 503, Letta's API rate limit). A longer
// one is reported (in the attempt's error and a warning), not obeyed.
const MaxServerRetryAfter = time.Minute

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
