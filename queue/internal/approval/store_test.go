package approval

import (
	"testing"
	"time"
)

// TestApprovalKeyTTLNeverNegative: an expiry near the largest Duration away made the approval
// keys' TTL wrap negative (keys without expiry); it saturates.
func TestApprovalKeyTTLNeverNegative(t *testing.T) {
	s := &Store{ttl: 24 * time.Hour}
	for _, until := range []time.Duration{time.Hour, 1<<63 - 1, 1<<63 - 1 - time.Hour} {
		p := &Pending{ExpiresAt: time.Now().Add(until)}
		if got := s.keyTTL(p); got < 24*time.Hour {
			t.Errorf("expiry %v away: key TTL %v, want at least the replies' TTL", until, got)
		}
	}
	if got := s.keyTTL(&Pending{ExpiresAt: time.Now().Add(-time.Hour)}); got <= 0 {
		t.Errorf("an expiry past: key TTL %v, want positive", got)
	}
}
