package main

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
)

// TestMain lets the test binary be a chaos worker (the run re-executes
// itself, as the command does).
func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(childWorker())
	}
	os.Exit(m.Run())
}

// TestChaosShort is the chaos run CI makes: 2 worker processes, 6 chats × 4
// numbered messages over 12 s, one SIGKILL at 3 s, one SIGTERM at 6 s and
// one Redis restart (3 s down) at 9 s. The SIGKILLed worker's turns are
// taken over within seconds (fast takeover); the run then waits for Asynq
// to recover their original tasks, which end at once without a write
// (60-70 s after the kill: the lease, 30 s, must have expired 30 s ago,
// and the replacement worker started right after the kill runs its
// recoverer a minute after its start), so it takes about 75 s. It fails when a turn is lost, reaches the simulator twice or
// out of its chat's order, or when the schedule could not be carried out.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("a chaos run of about 75 s")
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		if testredis.Required() {
			t.Fatalf("LETTAQ_REQUIRE_REDIS=1 but redis-server is not on PATH: %v", err)
		}
		t.Skip("redis-server is not on PATH")
	}
	cfg := Config{
		Workers: 2, Chats: 6, Messages: 4, Duration: 12 * time.Second,
		Schedule: []Action{{KillWorker, 3 * time.Second}, {TermWorker, 6 * time.Second}, {RestartRedis, 9 * time.Second}},
		Outage:   3 * time.Second,
		// Asynq's recovery is due ~62 s after the kill; the rest is margin
		// for a loaded machine.
		// The killed worker's original tasks end (taken over: at once, sending
		// nothing) when Asynq recovers them, ~62 s after the kill.
		Wait: 150 * time.Second, Settle: 80 * time.Second, Seed: 7, TakeoverAfter: 5 * time.Second,
		RedisServer: server, Dir: t.TempDir(),
	}
	var log strings.Builder
	rep, err := Run(context.Background(), cfg, &log)
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, log.String())
	}
	t.Logf("\n%s", rep.Table())
	if f := rep.Failures(); len(f) > 0 {
		t.Errorf("chaos run failed:\n%s\n%s", strings.Join(f, "\n"), log.String())
	}
	if rep.Kills != 1 || rep.Terms != 1 || rep.RedisRestarts != 1 || len(rep.ActionErrors) > 0 {
		t.Errorf("schedule: %d SIGKILL, %d SIGTERM, %d Redis restarts, errors %v; want 1 each\n%s",
			rep.Kills, rep.Terms, rep.RedisRestarts, rep.ActionErrors, log.String())
	}
	if rep.Enqueued != cfg.Chats*cfg.Messages || rep.Missing > 0 {
		t.Errorf("%d of %d turns enqueued, %d never reached the simulator", rep.Enqueued, cfg.Chats*cfg.Messages, rep.Missing)
	}
	if t.Failed() {
		for _, w := range rep.Workers {
			b, _ := os.ReadFile(cfg.Dir + "/worker-" + w.ID + ".log")
			t.Logf("--- worker %s log (tail):\n%s", w.ID, tailString(string(b), 3000))
		}
	}
}

func tailString(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// TestChaosReportsLostTurns runs the command's machinery with no worker at
// all: nothing can answer, so every turn must be reported lost and the run
// failed (the check the short run relies on can fail).
func TestChaosReportsLostTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a redis-server")
	}
	server, err := exec.LookPath("redis-server")
	if err != nil {
		if testredis.Required() {
			t.Fatalf("LETTAQ_REQUIRE_REDIS=1 but redis-server is not on PATH: %v", err)
		}
		t.Skip("redis-server is not on PATH")
	}
	cfg := Config{Workers: 0, Chats: 2, Messages: 2, Duration: 100 * time.Millisecond, Wait: time.Second,
		Seed: 1, RedisServer: server, Dir: t.TempDir()}
	var log strings.Builder
	rep, err := Run(context.Background(), cfg, &log)
	if err != nil {
		t.Fatalf("chaos run: %v\n%s", err, log.String())
	}
	if rep.Enqueued != 4 || len(rep.Lost) != 4 || rep.Answered != 0 || rep.Missing != 4 || rep.Settled {
		t.Errorf("enqueued %d, lost %v, answered %d, missing %d, settled %v; want 4 lost of 4, none answered, the queue not settled",
			rep.Enqueued, rep.Lost, rep.Answered, rep.Missing, rep.Settled)
	}
	f := strings.Join(rep.Failures(), "\n")
	if !strings.Contains(f, "4 turns lost: chat1#1, chat1#2, chat2#1, chat2#2") {
		t.Errorf("failures: %q", f)
	}
	if table := rep.Table(); !strings.Contains(table, "| **lost** (no final event, no journal outcome) | 4 |") {
		t.Errorf("table:\n%s", table)
	}
}
