package faultproxy_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/internal/testredis"
)

func setup(t *testing.T, retries int) (*faultproxy.Proxy, *redis.Client, *redis.Client, string) {
	t.Helper()
	srv := testredis.New(t)
	p := faultproxy.Start(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, DB: srv.DB, MaxRetries: retries})
	t.Cleanup(func() { _ = c.Close() })
	return p, c, srv.Client(t), "faultproxy:" + uuid.NewString() + ":"
}

// A SET whose reply is dropped ran at Redis; the client without retries
// gets an error.
func TestDropReplyRanWithoutReply(t *testing.T) {
	p, c, direct, k := setup(t, -1)
	ctx := context.Background()
	f := p.DropReply(faultproxy.Command("set", k+"a"))
	if err := c.Set(ctx, k+"a", "v", time.Minute).Err(); err == nil {
		t.Fatal("SET with its reply dropped: no error")
	}
	<-f.Fired()
	if v, err := direct.Get(ctx, k+"a").Result(); v != "v" || err != nil {
		t.Fatalf("GET after the dropped reply = %q, %v; want the SET to have run", v, err)
	}
	// The fault fired once: the next SET goes through.
	if err := c.Set(ctx, k+"a", "w", time.Minute).Err(); err != nil {
		t.Fatalf("SET after the fault: %v", err)
	}
	_ = direct.Del(ctx, k+"a")
}

// With go-redis's default retries a dropped reply runs the command twice:
// what the proxy exists to show.
func TestDropReplyRetriedRunsTwice(t *testing.T) {
	p, c, direct, k := setup(t, 3)
	ctx := context.Background()
	p.DropReply(faultproxy.Command("incr", k+"n"))
	n, err := c.Incr(ctx, k+"n").Result()
	if err != nil {
		t.Fatalf("INCR retried: %v", err)
	}
	if n != 2 {
		t.Fatalf("INCR whose reply was dropped, retried by go-redis = %d, want 2 (it ran twice)", n)
	}
	// A pipeline is sent again whole.
	p.DropReply(faultproxy.Command("incr", k+"m"))
	pp := c.Pipeline()
	pp.Incr(ctx, k+"l")
	m := pp.Incr(ctx, k+"m")
	if _, err := pp.Exec(ctx); err != nil {
		t.Fatalf("pipeline: %v", err)
	}
	if l, _ := direct.Get(ctx, k+"l").Int(); l != 2 || m.Val() != 2 {
		t.Fatalf("pipeline sent again: l=%d m=%d, want 2 and 2", l, m.Val())
	}
	_ = direct.Del(ctx, k+"n", k+"l", k+"m")
}

// CutBefore closes a pipeline's connection mid-way: the commands before the
// matched one ran, it and those after did not.
func TestCutBeforeMidPipeline(t *testing.T) {
	p, c, direct, k := setup(t, -1)
	ctx := context.Background()
	p.CutBefore(faultproxy.Command("set", k+"2"))
	pp := c.Pipeline()
	pp.Set(ctx, k+"1", "x", time.Minute)
	pp.Set(ctx, k+"2", "x", time.Minute)
	pp.Set(ctx, k+"3", "x", time.Minute)
	if _, err := pp.Exec(ctx); err == nil {
		t.Fatal("pipeline cut mid-way: no error")
	}
	n, err := direct.Exists(ctx, k+"1", k+"2", k+"3").Result()
	if err != nil || n != 1 {
		t.Fatalf("keys set by the cut pipeline = %d, %v; want only the first", n, err)
	}
	if v, _ := direct.Get(ctx, k+"1").Result(); v != "x" {
		t.Fatalf("the command before the cut did not run")
	}
	_ = direct.Del(ctx, k+"1")
}

func TestDelay(t *testing.T) {
	p, c, _, k := setup(t, -1)
	ctx := context.Background()
	f := p.Delay(faultproxy.Command("get", k), 200*time.Millisecond)
	start := time.Now()
	if err := c.Get(ctx, k).Err(); err != redis.Nil {
		t.Fatalf("GET: %v", err)
	}
	if d := time.Since(start); d < 200*time.Millisecond || !f.Done() {
		t.Fatalf("delayed GET took %v (fired %v), want ≥ 200ms", d, f.Done())
	}
}
