package testredis

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestPersistentRestart: what was written before a stop is there after the
// start, on the same address, and a client made before reconnects by
// itself; while stopped, nothing answers.
func TestPersistentRestart(t *testing.T) {
	t0 := time.Now()
	p := StartPersistent(t)
	t.Logf("redis-server on %s ready in %v", p.Addr, time.Since(t0).Round(time.Millisecond))
	rc := p.Client(t)
	ctx := context.Background()
	if err := rc.Set(ctx, "k", "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"n", "1"}}).Err(); err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	if err := p.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Since(t0)
	if err := p.Stop(); err == nil {
		t.Error("Stop of a stopped server: no error")
	}
	pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := rc.Ping(pctx).Err()
	cancel()
	if err == nil {
		t.Fatal("PING answered while the server was stopped")
	}
	if err := rc.Set(ctx, "k", "during", 0).Err(); err == nil {
		t.Fatal("SET succeeded while the server was stopped")
	}

	t0 = time.Now()
	if err := p.Start(); err != nil {
		t.Fatal(err)
	}
	started := time.Since(t0)
	if err := p.Start(); err == nil {
		t.Error("Start of a running server: no error")
	}
	if v, err := rc.Get(ctx, "k").Result(); err != nil || v != "before" {
		t.Fatalf("after restart: GET k = %q, %v; want \"before\"", v, err)
	}
	if err := rc.Set(ctx, "k", "after", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.XAdd(ctx, &redis.XAddArgs{Stream: "s", Values: []string{"n", "2"}}).Err(); err != nil {
		t.Fatal(err)
	}

	t0 = time.Now()
	if err := p.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted := time.Since(t0)
	if v, err := rc.Get(ctx, "k").Result(); err != nil || v != "after" {
		t.Fatalf("after second restart: GET k = %q, %v; want \"after\"", v, err)
	}
	if n, err := rc.XLen(ctx, "s").Result(); err != nil || n != 2 {
		t.Fatalf("after second restart: XLEN s = %d, %v; want 2", n, err)
	}
	t.Logf("stop %v, start %v, restart %v", stopped.Round(time.Millisecond), started.Round(time.Millisecond),
		restarted.Round(time.Millisecond))
}
