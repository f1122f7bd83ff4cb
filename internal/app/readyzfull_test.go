package app

import (
	"context"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
)

// A full Redis (maxmemory reached under noeviction, as the README advises)
// still answers PING while it refuses every write: the worker is not ready
// then, and says why (OOM) with the token, and it is ready again by itself
// once memory is freed.
func TestReadyzWhenRedisIsFull(t *testing.T) {
	rs := testredis.StartPersistent(t)
	cfg, err := ParseWorkerSettings([]string{"--http-addr=127.0.0.1:0", "--shutdown-timeout=2s"},
		env(map[string]string{"REDIS_URL": "redis://" + rs.Addr, "LETTAQ_HTTP_TOKEN": "s3cret"}), nil)
	if err != nil {
		t.Fatal(err)
	}
	lw := newLogWatch()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	r, err := StartWorker(ctx, cfg, slog.New(slog.NewJSONHandler(lw, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		<-r.Done()
	}()
	verbose := map[string]string{"Authorization": "Bearer s3cret"}
	// waitReadyz polls /readyz?verbose until it answers code (and, when
	// not ready, names want), and returns its body.
	waitReadyz := func(code int, want string, within time.Duration, what string) string {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			got, body := get(t, http.DefaultClient, "http://"+r.HTTPAddr+"/readyz?verbose=1", verbose)
			if got == code && strings.Contains(body, want) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz?verbose answered %d %s for %v, want %d naming %q", what, got, body, within, code, want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitReadyz(http.StatusOK, `"status":"ready"`, 10*time.Second, "at start")

	rdb := rs.Client(t)
	free, err := testredis.Fill(ctx, rdb, "test:")
	if err != nil {
		t.Fatal(err)
	}
	// The probe's write says it (Asynq's dequeue errors may say it first).
	body := waitReadyz(http.StatusServiceUnavailable, `"redis":"Redis is full: it refuses writes`, 10*time.Second, "Redis full")
	t.Logf("full: %s", strings.TrimSpace(body))
	notReady := 0
	for range 100 {
		if code, body := get(t, http.DefaultClient, "http://"+r.HTTPAddr+"/readyz", nil); code == http.StatusServiceUnavailable && body == `{"status":"not ready"}`+"\n" {
			notReady++
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("/readyz while full: not ready in %d of 100 samples", notReady)
	if notReady != 100 {
		t.Errorf("/readyz while full: not ready in %d of 100 samples", notReady)
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	freed := time.Now()
	waitReadyz(http.StatusOK, `"status":"ready"`, 10*time.Second, "memory freed")
	t.Logf("ready again %v after memory was freed", time.Since(freed).Round(10*time.Millisecond))
}
