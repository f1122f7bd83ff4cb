package main

import (
	"math"
	"os/exec"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestPredict: the loops' sum grows by the per-queue loops for each queue
// and keeps the per-server ones once.
func TestPredict(t *testing.T) {
	cfg := asynq.Config{TaskCheckInterval: 100 * time.Millisecond, DelayedTaskCheckInterval: time.Second}
	c1, t1 := predict(cfg, 1)
	c2, t2 := predict(cfg, 2)
	// per queue: dequeue 3×10/s, forward 4×1/s, janitor 2/8s, recoverer 5/60s
	perQueue := 30 + 4 + 2.0/8 + 5.0/60
	if math.Abs((c2-c1)-perQueue) > 1e-9 {
		t.Errorf("one more queue costs %.3f commands/s, want %.3f", c2-c1, perQueue)
	}
	// per server: heartbeat 6/5s, subscriber's PING 1/3s
	if want := perQueue + 6.0/5 + 1.0/3; math.Abs(c1-want) > 1e-9 {
		t.Errorf("one queue: %.3f commands/s, want %.3f", c1, want)
	}
	if want := 10 + 2 + 1.0/8 + 2.0/60 + 3.0/5 + 1.0/3; math.Abs(t1-want) > 1e-9 || t2 <= t1 {
		t.Errorf("round trips: %.3f for one queue (want %.3f), %.3f for two", t1, want, t2)
	}
}

// TestMeasureMatchesLoops: two idle servers on one queue send what the
// loops' table predicts, within a third (the dequeue poll's cycle is
// longer by its round trips, the window catches a loop's run or not).
func TestMeasureMatchesLoops(t *testing.T) {
	if testing.Short() {
		t.Skip("runs asynq servers against a redis-server of its own for seconds (skipped with -short)")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	srv, err := startRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer srv.stop()
	cfg := asynq.Config{Concurrency: 2, TaskCheckInterval: 100 * time.Millisecond, DelayedTaskCheckInterval: time.Second,
		Logger: discard{}, LogLevel: asynq.ErrorLevel}
	r, err := measure(srv.addr, cfg, 4, 2, time.Second, 3*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	got := float64(r.commands()) / r.secs / 2
	want, _ := predict(cfg, 4)
	if got < want*2/3 || got > want*4/3 {
		t.Errorf("%.1f commands/s per server, predicted %.1f (%v)", got, want, r.calls)
	}
	if r.calls["evalsha"] == 0 || r.calls["rpoplpush"] == 0 {
		t.Errorf("no dequeue script seen: %v", r.calls)
	}
	t.Logf("%.1f commands/s per server, predicted %.1f", got, want)
}
