package attempt

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestRetryDelayAndIsFailure(t *testing.T) {
	if d := RetryDelay(3, &retryAfterError{Delay: 7 * time.Second}, nil); d != 7*time.Second {
		t.Fatalf("retry after: %v", d)
	}
	// A retry that asks for no delay (a message not admitted, sent again) backs off like any
	// other: it used to run at once, against its ending's comment.
	if d := RetryDelay(0, &retryAfterError{}, nil); d < 800*time.Millisecond || d > 1200*time.Millisecond {
		t.Fatalf("retry with no delay asked: %v, want the backoff's ~1s", d)
	}
	if d := RetryDelay(3, &interruptedError{Err: context.Canceled}, nil); d != 100*time.Millisecond {
		t.Fatalf("interrupted: %v", d)
	}
	for n, want := range map[int]time.Duration{0: time.Second, 2: 4 * time.Second, 20: time.Minute} {
		d := RetryDelay(n, errors.New("x"), nil)
		if d < want*8/10 || d > want*12/10 {
			t.Errorf("n=%d: %v, want ~%v", n, d, want)
		}
	}
	if IsFailure(&interruptedError{Err: ErrShutdown}) || IsFailure(context.Canceled) || !IsFailure(errors.New("x")) || IsFailure(nil) {
		t.Fatal("IsFailure")
	}
}
