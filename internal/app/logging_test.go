package app

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// logSink collects log output and signals each write, so a test waits for a line without
// sleeping.
type logSink struct {
	mu     sync.Mutex
	b      strings.Builder
	notify chan struct{}
}

func newLogSink() *logSink { return &logSink{notify: make(chan struct{}, 1)} }

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	s.b.Write(p)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	return len(p), nil
}

func (s *logSink) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// waitFor waits until the output holds a line containing all of parts, and returns it.
func (s *logSink) waitFor(t *testing.T, parts ...string) string {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		for _, l := range strings.Split(s.String(), "\n") {
			ok := true
			for _, p := range parts {
				ok = ok && strings.Contains(l, p)
			}
			if ok {
				return l
			}
		}
		select {
		case <-s.notify:
		case <-timeout:
			t.Fatalf("no log line with %q in:\n%s", parts, s.String())
		}
	}
}

// startLoggedDevWorker starts a dev worker whose logs go to sink in format.
func startLoggedDevWorker(t *testing.T, format string, sink *logSink) *Running {
	t.Helper()
	cfg, err := ParseWorkerSettings([]string{"--dev", "--dev-redis-addr=127.0.0.1:0", "--dev-letta-addr=127.0.0.1:0",
		"--http-addr=off", "--shutdown-timeout=5s", "--task-check-interval=20ms"}, env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r, err := StartWorker(ctx, cfg, NewLogger(sink, format, "info"), &syncBuf{})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.Done():
		case <-time.After(15 * time.Second):
			t.Error("dev worker did not stop")
		}
	})
	return r
}

var durationKey = regexp.MustCompile(`timeout|interval|delay|elapsed|duration|latency|wait|ttft|_s$|_ms$`)

// The worker's JSON log: durations one way (Go duration text, never nanosecond integers),
// outcomes in the journal's words, a failure told once, and an archived task's line saying
// why instead of Asynq's "Retry exhausted" for a task that was never retried.
func TestWorkerLogLinesJSON(t *testing.T) {
	sink := newLogSink()
	r := startLoggedDevWorker(t, "json", sink)
	sink.waitFor(t, `"worker started"`)

	if code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "hello"); code != ExitOK {
		t.Fatalf("answered turn: exit %d %q", code, errOut)
	}
	finished := sink.waitFor(t, `"turn finished"`)
	r.Dev.Sim.CreateAgent("fails", nil)
	code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent=fails", "[[sim stop=error]] fail")
	if code != ExitFailed {
		t.Fatalf("failing turn: exit %d %q", code, errOut)
	}
	failed := sink.waitFor(t, `"turn failed"`)
	var fl map[string]any
	_ = json.Unmarshal([]byte(failed), &fl)
	archived := sink.waitFor(t, `"task archived`, fl["task_id"].(string))

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(sink.String()), "\n") {
		if !strings.HasPrefix(l, "{") {
			continue // the dev greeting
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not a JSON line: %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	var walk func(key string, v any, line map[string]any)
	walk = func(key string, v any, line map[string]any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(k, x, line)
			}
		case float64:
			if durationKey.MatchString(key) {
				t.Errorf("%q is a number (%v) in %v: durations are written as text", key, v, line["msg"])
			}
		case string:
			if durationKey.MatchString(key) && key != "reason" {
				if _, err := time.ParseDuration(v); err != nil {
					t.Errorf("%q = %q in %v: not a duration", key, v, line["msg"])
				}
			}
		}
	}
	for _, m := range lines {
		walk("", m, m)
		if msg, _ := m["msg"].(string); strings.Contains(msg, "Retry exhausted") {
			t.Errorf("Asynq's line for a task that was never retried: %v", m)
		}
	}
	start := lines[0]
	if start["msg"] != "lettaq worker starting" || start["task_check_interval"] != "20ms" || start["shutdown_timeout"] != "5s" || start["queues"] != "lettaq=1" ||
		start["thread_mode"] != "conversation" || start["ordering"] != "conversation" {
		t.Errorf("start line %v", start)
	}

	var fin map[string]any
	_ = json.Unmarshal([]byte(finished), &fin)
	if fin["outcome"] != "answered" {
		t.Errorf("turn finished: outcome %v, want the journal's \"answered\": %s", fin["outcome"], finished)
	}
	reason, _ := fl["reason"].(string)
	if fl["outcome"] != "failed" || fl["stop_reason"] != "error" || strings.Count(reason, "internal_error") > 1 || !strings.Contains(reason, "simulated error") {
		t.Errorf("turn failed: %s", failed)
	}
	if !strings.Contains(archived, "permanent") || !strings.Contains(archived, `"level":"INFO"`) {
		t.Errorf("archived line: %s", archived)
	}
}

// Text logs write the queues as LETTAQ_QUEUES takes them, not as a Go map.
func TestWorkerLogLinesText(t *testing.T) {
	sink := newLogSink()
	startLoggedDevWorker(t, "text", sink)
	line := sink.waitFor(t, "worker started")
	start := sink.waitFor(t, "lettaq worker starting")
	for _, l := range []string{line, start} {
		if strings.Contains(l, "map[") || !strings.Contains(l, `queues="lettaq=1"`) {
			t.Errorf("text line: %s", l)
		}
	}
	if !strings.Contains(start, "task_check_interval=20ms") {
		t.Errorf("start line: %s", start)
	}
}
