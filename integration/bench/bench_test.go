package main

import (
	"context"
	"math"
	"os"
	"runtime/metrics"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
)

func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "-serve-sim" {
		serveSim(os.Args[2:])
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// realRedis is the real Redis a bench test needs; without one (or with -short) the test is
// skipped.
func realRedis(t *testing.T) *testredis.Server {
	t.Helper()
	if testing.Short() {
		t.Skip("short")
	}
	srv, ok := testredis.Real(t)
	if !ok {
		t.Skip("no real Redis")
	}
	return srv
}

// TestBenchSmall runs every measurement at a small size (the full run is by hand: see
// docs/performance.md). It needs a real Redis.
func TestBenchSmall(t *testing.T) {
	srv := realRedis(t)
	c := Config{RedisURL: srv.URL(), Latency: 20, Throughput: 200, Concurrent: envInt("LETTAQ_BENCH_CONCURRENT", 100),
		Think: 2 * time.Second, Ping: 200 * time.Millisecond, CheckInterval: 10 * time.Millisecond, Workers: 50}
	r, err := Run(context.Background(), c, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	table := r.Table()
	t.Log("\n" + table)
	if r.Answered != int64(c.Concurrent) || r.UserMessages != c.Concurrent || r.DuplicateOtids != 0 || r.Failed != 0 {
		t.Errorf("concurrency run: %d answered, %d user messages, %d duplicate otids, %d failed; want %d, %d, 0, 0",
			r.Answered, r.UserMessages, r.DuplicateOtids, r.Failed, c.Concurrent, c.Concurrent)
	}
	if r.TurnsPerSec <= 0 || r.NoopPerSec <= 0 || !strings.Contains(table, "request reaches Letta") {
		t.Errorf("incomplete results:\n%s", table)
	}
	// What a turn holds in Redis (MEMORY USAGE of the run's keys) feeds the capacity plan,
	// which a full run prints from its own figures (this small run's RSS per turn is too
	// small to read, so it prints none).
	if b, k := r.TurnRedisBytes, r.ThinkRedisBytes; b.Asynq <= 0 || b.Lettaq <= 0 || b.Markers <= 0 || b.Markers >= b.Lettaq || k.Lettaq <= 0 || !strings.Contains(table, "Redis memory per in-flight thinking turn") {
		t.Errorf("Redis memory per finished turn %+v, per thinking turn %+v:\n%s", b, k, table)
	}
	// Asynq starts a goroutine per task it runs: the scheduler row counts at least that.
	if r.TurnCPU.Goroutines < 1 || r.NoopCPU.Goroutines < 1 || r.TurnCPU.Waits <= 0 || !strings.Contains(table, "bench process scheduler") {
		t.Errorf("scheduler figures: %.1f and %.1f goroutines per turn and task, %.2f waits sampled per turn:\n%s",
			r.TurnCPU.Goroutines, r.NoopCPU.Goroutines, r.TurnCPU.Waits, table)
	}
}

// meanWait averages the waits between two readings of the histogram: bucket
// midpoints, the open-ended buckets at their finite bound, earlier counts
// taken away.
func TestMeanWait(t *testing.T) {
	buckets := []float64{math.Inf(-1), 0, 10e-6, 30e-6, math.Inf(1)}
	a := schedMark{wait: &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{0, 5, 0, 7}}}
	b := schedMark{wait: &metrics.Float64Histogram{Buckets: buckets, Counts: []uint64{1, 6, 2, 8}}}
	// new: 1 at 0 (≤0), 1 at 5 µs, 2 at 20 µs, 1 at 30 µs (≥30 µs) → 75 µs / 5
	got, n := meanWait(a, b)
	if n != 5 || got != 15*time.Microsecond {
		t.Errorf("meanWait = %v over %d, want 15µs over 5", got, n)
	}
	if got, n := meanWait(b, b); got != 0 || n != 0 {
		t.Errorf("no new waits: %v over %d, want 0 over 0", got, n)
	}
	if got, n := meanWait(schedMark{}, b); got != 0 || n != 0 {
		t.Errorf("no first reading: %v over %d, want 0 over 0", got, n)
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// With Rounds, the table's throughput figures are the median round's, every round's ratio is
// listed, and no round leaves its keys behind.
func TestThroughputRounds(t *testing.T) {
	srv := realRedis(t)
	c := Config{RedisURL: srv.URL(), Throughput: 100, Rounds: 3, CheckInterval: 10 * time.Millisecond, Workers: 50}
	r, err := Run(context.Background(), c, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	table := r.Table()
	t.Log("\n" + table)
	if len(r.RoundRatios) != 3 {
		t.Fatalf("round ratios %v, want 3", r.RoundRatios)
	}
	s := slices.Clone(r.RoundRatios)
	slices.Sort(s)
	if r.ratio() != s[1] || r.TurnsPerSec <= 0 {
		t.Errorf("table's ratio %v (%v turns/s), want the median of %v", r.ratio(), r.TurnsPerSec, r.RoundRatios)
	}
	if !strings.Contains(table, "over 3 rounds") {
		t.Errorf("no rounds row:\n%s", table)
	}
	rdb := srv.Client(t)
	if r.NaivePerSec <= 0 {
		t.Errorf("no naive throughput:\n%s", table)
	}
	for _, p := range []string{"lettaq-bench-" + r.Run + "*", "asynq:{bench-tp-" + r.Run + "*", "asynq:{bench-noop-" + r.Run + "*", "asynq:{bench-naive-" + r.Run + "*"} {
		if keys, err := rdb.Keys(context.Background(), p).Result(); err != nil || len(keys) > 0 {
			t.Errorf("keys left matching %s: %d (%v)", p, len(keys), err)
		}
	}
}
