package app

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// TestEnqueueChecksConfigurationBeforeRedis: a bad setting is refused with exit 2 and a
// message naming it, whether or not a Redis answers (it used to be exit 5 without a Redis and
// 2 with one, since enqueue connected before it looked at the rest of its configuration).
func TestEnqueueChecksConfigurationBeforeRedis(t *testing.T) {
	down := "redis://" + closedAddr(t) + "/0"
	for _, c := range []struct {
		name string
		env  map[string]string
		args []string
		want string // in the message
	}{
		{"letta url with a password", map[string]string{"LETTA_BASE_URL": "http://user:pw@letta:8283"}, nil, "LETTA_BASE_URL"},
		{"letta url not http", map[string]string{"LETTA_BASE_URL": "letta:8283"}, nil, "LETTA_BASE_URL"},
		{"redis port out of range", map[string]string{"REDIS_URL": "redis://127.0.0.1:99999/0"}, nil, "REDIS_URL"},
		{"wait timeout 0", nil, []string{"--wait", "--timeout=0"}, "--timeout"},
		{"negative timeout", nil, []string{"--timeout=-1s"}, "--timeout"},
		{"unknown ordering", nil, []string{"--ordering=sometimes"}, "--ordering"},
	} {
		t.Run(c.name, func(t *testing.T) {
			env := map[string]string{"REDIS_URL": down}
			for k, v := range c.env {
				env[k] = v
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var out, errOut bytes.Buffer
			args := append(append([]string{"--agent", "some-agent-name", "--ordering", "off", "--queue", "lettaq-unit-cfgfirst"}, c.args...), "hello")
			code := RunEnqueue(ctx, args, func(k string) string { return env[k] }, strings.NewReader(""), &out, &errOut)
			if code != ExitUsage || !strings.Contains(errOut.String(), c.want) {
				t.Fatalf("exit %d, want %d with a message naming %s:\n%s%s", code, ExitUsage, c.want, out.String(), errOut.String())
			}
		})
	}
}

// TestRedisCredentialsRefusedArePermanent: a Redis that refuses REDIS_URL's credentials (a
// wrong password, or none where one is needed) is a configuration error: enqueue exits 2
// saying so (not 5, "is it running?"), and the worker exits 2 at start instead of waiting
// for Redis forever.
func TestRedisCredentialsRefusedArePermanent(t *testing.T) {
	m := miniredis.RunT(t)
	m.RequireAuth("right")
	for _, url := range []string{"redis://:wrong@" + m.Addr() + "/0", "redis://" + m.Addr() + "/0"} {
		env := map[string]string{"REDIS_URL": url, "LETTAQ_HTTP_ADDR": "off"}
		getenv := func(k string) string { return env[k] }
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var out, errOut bytes.Buffer
		code := RunEnqueue(ctx, []string{"--agent", "agent-00000000-0000-4000-8000-000000000000", "--ordering", "off", "hello"},
			getenv, strings.NewReader(""), &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), "permanent") || strings.Contains(errOut.String(), "is it running") {
			t.Errorf("enqueue %s: exit %d, want %d with a message that the credentials are refused (permanent):\n%s", redactURL(url), code, ExitUsage, errOut.String())
		}
		out.Reset()
		errOut.Reset()
		start := time.Now()
		code = RunWorker(ctx, nil, getenv, &out, &errOut)
		cancel()
		if code != ExitUsage || !strings.Contains(errOut.String(), "permanent") {
			t.Errorf("worker %s: exit %d after %v, want %d at start with a message that the credentials are refused (permanent):\n%s",
				redactURL(url), code, time.Since(start).Round(time.Millisecond), ExitUsage, errOut.String())
		}
	}
}

// The same --message-id with another text is refused, exit 2, naming both texts' hashes; the
// same text again is the duplicate it always was (exit 0).
func TestEnqueueMessageIDReusedWithOtherText(t *testing.T) {
	r := startDevWorker(t)
	if code, _, errOut := enqueue(t, r, "--message-id=reused", "one"); code != ExitOK {
		t.Fatalf("first: exit %d %q", code, errOut)
	}
	if code, out, errOut := enqueue(t, r, "--message-id=reused", "one"); code != ExitOK || !strings.Contains(out, "duplicate") {
		t.Errorf("the same text again: exit %d, stdout %q, stderr %q; want 0, a duplicate", code, out, errOut)
	}
	code, out, errOut := enqueue(t, r, "--message-id=reused", "two")
	if code != ExitUsage || strings.Count(errOut, "sha256") != 1 || !strings.Contains(errOut, "another text") {
		t.Errorf("another text: exit %d, stdout %q, stderr %q; want %d naming both texts' hashes", code, out, errOut, ExitUsage)
	}
}

// The worker's retention settings reach Redis: a finished turn's journal keys expire within
// LETTAQ_JOURNAL_RETENTION and its reply stream within LETTAQ_REPLY_STREAM_TTL (they were
// fixed in Go: 7 days, and never).
func TestWorkerRetentionSettings(t *testing.T) {
	r, _ := startDevWorkerWith(t, "--journal-retention=2h", "--reply-stream-ttl=1h")
	if code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--chat=ttl", "hello"); code != ExitOK {
		t.Fatalf("exit %d %q", code, errOut)
	}
	rdb := redis.NewClient(&redis.Options{Addr: r.RedisAddr})
	defer rdb.Close()
	ctx := context.Background()
	keys, err := rdb.Keys(ctx, "lettaq:*").Result()
	if err != nil {
		t.Fatal(err)
	}
	var journal, stream int
	for _, k := range keys {
		ttl, err := rdb.TTL(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case strings.HasPrefix(k, "lettaq:replies:"):
			stream++
			if ttl <= 0 || ttl > time.Hour {
				t.Errorf("reply stream %s: TTL %v, want at most 1h", k, ttl)
			}
		case strings.HasPrefix(k, "lettaq:journal:"):
			journal++
			if ttl <= 0 || ttl > 2*time.Hour {
				t.Errorf("journal key %s: TTL %v, want at most 2h", k, ttl)
			}
		}
	}
	if journal == 0 || stream == 0 {
		t.Errorf("%d journal keys and %d reply streams among %q", journal, stream, keys)
	}
}
