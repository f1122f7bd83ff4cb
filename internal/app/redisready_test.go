package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// logWatch is a JSON log sink that signals when a line with a given message arrives.
type logWatch struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	waits map[string]chan struct{}
}

func newLogWatch() *logWatch { return &logWatch{waits: map[string]chan struct{}{}} }

func (w *logWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	var line struct {
		Msg string `json:"msg"`
	}
	if json.Unmarshal(p, &line) == nil {
		if ch, ok := w.waits[line.Msg]; ok {
			close(ch)
			delete(w.waits, line.Msg)
		}
	}
	return len(p), nil
}

// on returns a channel closed when a line with msg is written from now on.
func (w *logWatch) on(msg string) <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	ch := make(chan struct{})
	w.waits[msg] = ch
	return ch
}

func (w *logWatch) String() string { w.mu.Lock(); defer w.mu.Unlock(); return w.buf.String() }

// lines checks that every line is one JSON object and returns them.
func (w *logWatch) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(w.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Errorf("log line is not JSON: %q", l)
			continue
		}
		out = append(out, m)
	}
	return out
}

func waitCh(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
}

func TestGoRedisLogsThroughSlog(t *testing.T) {
	lw := newLogWatch()
	SetRedisLogger(slog.New(slog.NewJSONHandler(lw, nil)), slog.LevelWarn)
	rdb := redis.NewClient(&redis.Options{Addr: closedAddr(t), DialerRetryTimeout: time.Millisecond})
	defer rdb.Close()
	for range 3 {
		if err := rdb.Ping(context.Background()).Err(); err == nil {
			t.Fatal("PING of a closed port answered")
		}
	}
	var fromRedis int
	for _, l := range lw.lines(t) {
		if l["component"] == "go-redis" {
			fromRedis++
			if l["level"] != "WARN" || !strings.Contains(l["msg"].(string), "failed to dial") {
				t.Errorf("go-redis line: %v", l)
			}
		}
	}
	// Three failed dials, one line: repeats within 10 s are counted, not written.
	if fromRedis != 1 {
		t.Errorf("%d go-redis lines in the log, want 1:\n%s", fromRedis, lw.String())
	}
}

func TestEnqueueWithoutRedis(t *testing.T) {
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"--dev", "--dev-redis-addr=" + addr, "hello"},
		{"--dev", "--dev-redis-addr=" + addr, "--wait", "hello"},
		{"--dev", "--dev-redis-addr=" + addr, "journal", "recent"},
	} {
		var out, errOut syncBuf
		code := RunEnqueue(context.Background(), args, env(nil), strings.NewReader(""), &out, &errOut)
		msg := errOut.String()
		if code != ExitNoRedis || strings.Count(msg, "\n") != 1 ||
			!strings.HasPrefix(msg, "enqueue: no Redis at "+addr+" (is the dev worker running? start it with `"+workerCommand+" --dev --dev-redis-addr="+addr+"`") {
			t.Errorf("%v: exit %d, stderr %q", args, code, msg)
		}
	}
	var out, errOut syncBuf
	code := RunEnqueue(context.Background(), []string{"--redis-url=redis://" + addr, "--agent=a", "hi"}, env(nil), strings.NewReader(""), &out, &errOut)
	if code != ExitNoRedis || !strings.Contains(errOut.String(), "no Redis at "+addr+" (is REDIS_URL") {
		t.Errorf("REDIS_URL: exit %d, stderr %q", code, errOut.String())
	}
	// Bad input is still bad input without Redis.
	if code := RunEnqueue(context.Background(), []string{"--dev", "--dev-redis-addr=" + addr}, env(nil), strings.NewReader(""), &out, &errOut); code != ExitUsage {
		t.Errorf("no text without Redis: exit %d", code)
	}
}

func TestReadyzDuringAnOutage(t *testing.T) {
	addr := closedAddr(t)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	lw := newLogWatch()
	notReady := lw.on("Redis does not answer: not ready")
	h, closeAll := NewHTTPHandler(HTTPOptions{Token: "s3cret", Redis: rdb, Logger: slog.New(slog.NewJSONHandler(lw, nil))})
	defer closeAll()
	ts := httptest.NewServer(h)
	defer ts.Close()
	waitCh(t, notReady, "the probe's first PING")
	var slowest time.Duration
	for i := range 5 {
		start := time.Now()
		code, body := get(t, ts.Client(), ts.URL+"/readyz", nil)
		took := time.Since(start)
		slowest = max(slowest, took)
		if took > 250*time.Millisecond {
			t.Errorf("/readyz #%d took %v during the outage", i, took)
		}
		if code != http.StatusServiceUnavailable || body != `{"status":"not ready"}`+"\n" {
			t.Errorf("/readyz = %d %q", code, body)
		}
	}
	t.Logf("slowest /readyz of 5 during the outage: %v", slowest)
	if code, _ := get(t, ts.Client(), ts.URL+"/readyz?verbose=1", nil); code != http.StatusUnauthorized {
		t.Errorf("/readyz?verbose=1 without the token = %d", code)
	}
	code, body := get(t, ts.Client(), ts.URL+"/readyz?verbose=1", map[string]string{"Authorization": "Bearer s3cret"})
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "connection refused") {
		t.Errorf("/readyz?verbose=1 with the token = %d %q", code, body)
	}
	// The outage is in the log, once.
	if n := strings.Count(lw.String(), "Redis does not answer"); n != 1 {
		t.Errorf("%d outage lines:\n%s", n, lw.String())
	}
	lw.lines(t)
}

func TestWorkerWaitsForRedis(t *testing.T) {
	addr := closedAddr(t)
	cfg, err := ParseWorkerSettings([]string{"--http-addr=127.0.0.1:0", "--shutdown-timeout=2s"},
		env(map[string]string{"REDIS_URL": "redis://" + addr}), nil)
	if err != nil {
		t.Fatal(err)
	}
	lw := newLogWatch()
	logger := slog.New(slog.NewJSONHandler(lw, nil))
	SetRedisLogger(logger, slog.LevelWarn)
	firstWait, started := lw.on("waiting for Redis: not taking turns until it answers"), lw.on("worker started")
	probeOK := lw.on("Redis answers again: ready") // /readyz's background PING
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := StartWorker(ctx, cfg, logger, nil)
	if err != nil {
		t.Fatal(err)
	}
	waitCh(t, firstWait, "a wait line")
	if code, body := get(t, http.DefaultClient, "http://"+r.HTTPAddr+"/readyz", nil); code != http.StatusServiceUnavailable {
		t.Errorf("/readyz while waiting for Redis = %d %q", code, body)
	}
	select {
	case <-started:
		t.Fatal("worker started without Redis")
	default:
	}

	mr := miniredis.NewMiniRedis()
	if err := mr.StartAddr(addr); err != nil {
		t.Fatal(err)
	}
	defer mr.Close()
	waitCh(t, started, "worker started")
	waitCh(t, probeOK, "the readiness probe to see Redis")
	if code, body := get(t, http.DefaultClient, "http://"+r.HTTPAddr+"/readyz", nil); code != http.StatusOK {
		t.Errorf("/readyz once Redis answers = %d %q", code, body)
	}
	cancel()
	waitCh(t, r.Done(), "the worker to stop")

	var waits int
	for _, l := range lw.lines(t) {
		if l["msg"] == "waiting for Redis: not taking turns until it answers" {
			waits++
			if l["redis"] != addr || l["retry_in"] == nil || !strings.Contains(l["error"].(string), "refused") {
				t.Errorf("wait line: %v", l)
			}
		}
	}
	if waits < 1 {
		t.Errorf("no wait line:\n%s", lw.String())
	}
	if strings.Index(lw.String(), "waiting for Redis") > strings.Index(lw.String(), "worker started") {
		t.Errorf("worker started before Redis answered:\n%s", lw.String())
	}
}
