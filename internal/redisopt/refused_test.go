package redisopt

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/rediscluster"
)

// A lean cluster client rides out a slot half moved: a script, a pipeline
// and a MULTI whose keys the migration split between source and target
// are refused with TRYAGAIN, which go-redis alone returns after a few
// repeats; the lean client sends them again until the slot has moved, and
// each runs exactly once.
func TestLeanClusterClientRidesOutASplitSlot(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster")
	}
	c := rediscluster.Start(t, rediscluster.Config{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rc := Lean(asynq.RedisClusterClientOpt{Addrs: c.Seeds()}).MakeRedisClient().(*redis.ClusterClient)
	redirects := rediscluster.CountRedirects(rc)
	t.Cleanup(func() { _ = rc.Close() })
	plain := c.Client(t)

	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := ms[0].Slots[0][0] + 5
	tag := rediscluster.TagForSlot(slot)
	a, b, n := tag+"a", tag+"b", tag+"n"
	for _, k := range []string{a, b} {
		if err := rc.Set(ctx, k, 0, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	m, err := c.StartMigration(ctx, slot, ms[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Move(ctx, b); err != nil { // a on the source, b on the target
		t.Fatal(err)
	}
	both := redis.NewScript(`redis.call("INCR", KEYS[1]) return redis.call("INCR", KEYS[2])`)
	if err := both.Run(ctx, plain, []string{a, b}).Err(); !redis.IsTryAgainError(err) {
		t.Fatalf("go-redis alone, script on the split keys: %v, want TRYAGAIN (the slot is not split)", err)
	}

	ops := map[string]func() error{
		"script": func() error { return both.Run(ctx, rc, []string{a, b}).Err() },
		"pipeline": func() error {
			_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, n) // one key: through at once (ASK)
				both.Eval(ctx, p, []string{a, b})
				return nil
			})
			return err
		},
		"multi": func() error {
			_, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
				p.Incr(ctx, a)
				p.Incr(ctx, b)
				return nil
			})
			return err
		},
	}
	var mu sync.Mutex
	done := map[string]error{}
	var wg sync.WaitGroup
	for name, op := range ops {
		wg.Go(func() {
			err := op()
			mu.Lock()
			done[name] = err
			mu.Unlock()
		})
	}
	// Past go-redis's own repeats (MaxRedirects, 3) of each, the three are
	// still waiting.
	returned := func() int {
		mu.Lock()
		defer mu.Unlock()
		return len(done)
	}
	for redirects.Counts().TryAgain < 3*(3+1)+3 && returned() == 0 {
		if ctx.Err() != nil {
			t.Fatalf("the split slot was not met: %+v", redirects.Counts())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if returned() > 0 {
		_ = m.Finish(ctx, rc)
		wg.Wait()
		t.Fatalf("returned while the slot was split: %v (cluster errors met: %+v)", done, redirects.Counts())
	}
	t0 := time.Now()
	if err := m.Finish(ctx, rc); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for name, err := range done {
		if err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	get := func(k string) string {
		v, err := rc.Get(ctx, k).Result()
		if err != nil {
			t.Fatalf("GET %s: %v", k, err)
		}
		return v
	}
	if va, vb, vn := get(a), get(b), get(n); va != "3" || vb != "3" || vn != "1" {
		t.Errorf("a=%s b=%s n=%s, want 3, 3, 1: each write once", va, vb, vn)
	}
	t.Logf("the three went through %v after the slot moved; cluster errors met: %+v", time.Since(t0).Round(time.Millisecond), redirects.Counts())
}
