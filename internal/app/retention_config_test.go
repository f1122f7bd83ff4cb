package app

import (
	"testing"
	"time"
)

// The reply streams keep their events as long as the journal keeps its
// records unless LETTAQ_REPLY_STREAM_TTL says otherwise; 0 still means never.
func TestReplyStreamTTLFollowsJournalRetention(t *testing.T) {
	for _, tt := range []struct {
		env  map[string]string
		want time.Duration
	}{
		{nil, 168 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h"}, 24 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h", "LETTAQ_REPLY_STREAM_TTL": "journal"}, 24 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h", "LETTAQ_REPLY_STREAM_TTL": "1h"}, time.Hour},
		{map[string]string{"LETTAQ_REPLY_STREAM_TTL": "0"}, 0},
	} {
		c, err := ParseWorkerSettings(nil, env(tt.env), nil)
		if err != nil {
			t.Fatalf("%v: %v", tt.env, err)
		}
		if c.ReplyStreamTTL != tt.want {
			t.Errorf("%v: ReplyStreamTTL = %v, want %v", tt.env, c.ReplyStreamTTL, tt.want)
		}
	}
	if _, err := ParseWorkerSettings([]string{"--reply-stream-ttl=weekly"}, env(nil), nil); err == nil {
		t.Error("--reply-stream-ttl=weekly was accepted")
	}
}
