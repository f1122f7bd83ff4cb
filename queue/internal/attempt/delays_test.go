package attempt

import (
	"strings"
	"testing"
	"time"
)

// A refusal's Retry-After is obeyed up to MaxServerRetryAfter; beyond it the
// wait is the cap, and the note says what Letta asked for.
func TestRefusalWaitCapsAbsurdRetryAfter(t *testing.T) {
	for _, tc := range []struct {
		retryAfter, want time.Duration
		noted            bool
	}{
		{0, 0, false},
		{7 * time.Second, 7 * time.Second, false},
		{MaxServerRetryAfter, MaxServerRetryAfter, false},
		{time.Hour, MaxServerRetryAfter, true},
	} {
		got, note := refusalWait(tc.retryAfter)
		if got != tc.want || (note != "") != tc.noted || tc.noted && !strings.Contains(note, "1h0m0s") {
			t.Errorf("Retry-After %v: wait %v note %q, want %v (noted %v)", tc.retryAfter, got, note, tc.want, tc.noted)
		}
	}
}
