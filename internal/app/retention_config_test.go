package app

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
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

// enqueue writes reply events of its own (notify here; accepted and cancel
// events too) with the worker's stream retention: LETTAQ_JOURNAL_RETENTION,
// LETTAQ_REPLY_STREAM_TTL (flag over variable), the same defaults; a bad
// value exits 2 naming the variable, before anything connects.
func TestEnqueueReplyStreamTTL(t *testing.T) {
	m := miniredis.RunT(t)
	for i, tc := range []struct {
		env  map[string]string
		args []string
		want time.Duration // -1: no TTL
	}{
		{nil, nil, 168 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h"}, nil, 24 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h", "LETTAQ_REPLY_STREAM_TTL": "1h"}, nil, time.Hour},
		{map[string]string{"LETTAQ_REPLY_STREAM_TTL": "1h"}, []string{"--reply-stream-ttl=journal", "--journal-retention=2h"}, 2 * time.Hour},
		{map[string]string{"LETTAQ_REPLY_STREAM_TTL": "0"}, nil, -1},
	} {
		vars := map[string]string{"REDIS_URL": "redis://" + m.Addr()}
		for k, v := range tc.env {
			vars[k] = v
		}
		chat := fmt.Sprintf("ttl%d", i)
		args := append(append([]string{"notify"}, tc.args...), "--chat=web:"+chat, "--key=k", "hello")
		var out, errOut bytes.Buffer
		if code := RunEnqueue(context.Background(), args, env(vars), strings.NewReader(""), &out, &errOut); code != ExitOK {
			t.Fatalf("%v %q: exit %d, %s", tc.env, args, code, errOut.String())
		}
		got := m.TTL("lettaq:replies:web:" + chat)
		if tc.want < 0 && got != 0 || tc.want > 0 && got != tc.want {
			t.Errorf("%v %q: the stream's TTL is %v, want %v", tc.env, args, got, tc.want)
		}
	}
	var out, errOut bytes.Buffer
	bad := env(map[string]string{"REDIS_URL": "redis://" + m.Addr(), "LETTAQ_REPLY_STREAM_TTL": "weekly"})
	if code := RunEnqueue(context.Background(), []string{"notify", "--chat=web:c", "hello"}, bad, strings.NewReader(""), &out, &errOut); code != ExitUsage ||
		!strings.Contains(errOut.String(), `LETTAQ_REPLY_STREAM_TTL="weekly"`) {
		t.Errorf("LETTAQ_REPLY_STREAM_TTL=weekly: exit %d, stderr %q", code, errOut.String())
	}
}

// The relay reads the workers' stream retention for the reply events it
// writes itself, with the same defaults; a bad value is refused naming it.
func TestRelayReplyStreamTTL(t *testing.T) {
	base := map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://127.0.0.1:1"}
	for _, tc := range []struct {
		env  map[string]string
		args []string
		want time.Duration
	}{
		{nil, nil, 168 * time.Hour},
		{map[string]string{"LETTAQ_JOURNAL_RETENTION": "24h"}, nil, 24 * time.Hour},
		{map[string]string{"LETTAQ_REPLY_STREAM_TTL": "1h"}, []string{"--reply-stream-ttl=2h"}, 2 * time.Hour},
		{map[string]string{"LETTAQ_REPLY_STREAM_TTL": "0"}, nil, -1},
	} {
		vars := map[string]string{}
		for k, v := range base {
			vars[k] = v
		}
		for k, v := range tc.env {
			vars[k] = v
		}
		c, err := ParseRelaySettings(tc.args, env(vars), nil)
		if err != nil || c.ReplyStreamTTL != tc.want {
			t.Errorf("%v %q: ReplyStreamTTL %v, %v; want %v", tc.env, tc.args, c.ReplyStreamTTL, err, tc.want)
		}
	}
	_, err := ParseRelaySettings(nil, env(map[string]string{"LETTAQ_RELAY_FAKE_URL": "http://127.0.0.1:1", "LETTAQ_JOURNAL_RETENTION": "1s"}), nil)
	if err == nil || !strings.Contains(err.Error(), "LETTAQ_JOURNAL_RETENTION") {
		t.Errorf("LETTAQ_JOURNAL_RETENTION=1s: %v, want refused naming it", err)
	}
}
