package redisopt

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
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

// leanFakeClient is a lean cluster client of the fake node at addr.
func leanFakeClient(t *testing.T, addr string) *redis.ClusterClient {
	rc := Lean(asynq.RedisClusterClientOpt{Addrs: []string{addr}}).MakeRedisClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// refuseFirst is a fake node's plan that refuses the first n writes with
// CLUSTERDOWN and runs the others.
func refuseFirst(n int) func(int) fakeAction {
	return func(i int) fakeAction {
		if i <= n {
			return fakeClusterDown
		}
		return fakeRun
	}
}

// A lean cluster client rides out a cluster that is down (a master died
// and its replica is not yet promoted): the command, the pipeline and the
// MULTI … EXEC are refused with CLUSTERDOWN more times than go-redis
// repeats them (its 3 repeats of the command and of the pipeline; none of
// the MULTI, whose queued commands were refused), and are sent again
// until they run, each once.
func TestLeanClusterClientRidesOutClusterDown(t *testing.T) {
	const refusals = 8 // go-redis alone: 4 attempts of a command, 4 of a pipeline (8 writes)
	cases := map[string]struct {
		op   func(ctx context.Context, rc *redis.ClusterClient) error
		want map[string]int
	}{
		"command": {
			op:   func(ctx context.Context, rc *redis.ClusterClient) error { return rc.Incr(ctx, "a").Err() },
			want: map[string]int{"a": 1},
		},
		"pipeline": {
			op: func(ctx context.Context, rc *redis.ClusterClient) error {
				_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "a")
					p.Incr(ctx, "b")
					return nil
				})
				return err
			},
			want: map[string]int{"a": 1, "b": 1},
		},
		"multi": {
			op: func(ctx context.Context, rc *redis.ClusterClient) error {
				_, err := rc.TxPipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "a")
					p.Incr(ctx, "a")
					return nil
				})
				return err
			},
			want: map[string]int{"a": 2},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := startFakeNode(t, "127.0.0.1:0", "", refuseFirst(refusals))
			rc := leanFakeClient(t, f.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			t0 := time.Now()
			if err := c.op(ctx, rc); err != nil {
				t.Fatalf("%v after %d writes", err, f.Writes())
			}
			if f.Writes() <= refusals {
				t.Fatalf("ran after %d writes, of which %d refused", f.Writes(), refusals)
			}
			for k, v := range c.want {
				if got := f.Val(k); got != v {
					t.Errorf("%s = %d, want %d: each INCR once", k, got, v)
				}
			}
			t.Logf("ran after %d refusals in %v", refusals, time.Since(t0).Round(time.Millisecond))
		})
	}
}

// dialCounter counts a client's failed dials.
type dialCounter struct{ failed atomic.Int64 }

func (d *dialCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			d.failed.Add(1)
		}
		return c, err
	}
}

func (d *dialCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (d *dialCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A lean cluster client rides out a master whose address refuses
// connections (it died; the slot map still names it): a command that
// could not be sent, past go-redis's own repeats (4 attempts of 5 dials
// each), is sent again once the address answers, and runs once.
func TestLeanClusterClientRidesOutARefusedConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	_ = ln.Close() // connections to dead are refused
	seed := startFakeNode(t, "127.0.0.1:0", dead, refuseFirst(0))
	rc := leanFakeClient(t, seed.Addr())
	dials := &dialCounter{}
	rc.OnNewNode(func(n *redis.Client) { n.AddHook(dials) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	done := make(chan error, 1)
	go func() { done <- rc.Incr(ctx, "a").Err() }()
	for dials.failed.Load() < 4*5+5 {
		select {
		case err := <-done:
			t.Fatalf("returned while the master's address refused connections (%d dials failed): %v", dials.failed.Load(), err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	t0 := time.Now()
	node := startFakeNode(t, dead, "", refuseFirst(0))
	if err := <-done; err != nil {
		t.Fatalf("after %d failed dials: %v", dials.failed.Load(), err)
	}
	if got := node.Val("a"); got != 1 {
		t.Errorf("a = %d, want 1", got)
	}
	t.Logf("ran %v after the address answered, %d dials failed before", time.Since(t0).Round(time.Millisecond), dials.failed.Load())
}

// A command or pipeline whose reply was lost (the node ran it, then the
// connection closed) is not sent again by the lean client even when
// go-redis's own repeat of it ends refused: it may have run.
func TestLeanClusterClientDoesNotResendAfterALostReply(t *testing.T) {
	plan := func(i int) fakeAction { // runs the first, loses its reply, then the cluster is down
		switch {
		case i == 1:
			return fakeRunAndDrop
		case i <= 20:
			return fakeClusterDown
		}
		return fakeRun
	}
	cases := map[string]struct {
		op   func(ctx context.Context, rc *redis.ClusterClient) error
		want map[string]int
	}{
		"command": {
			op:   func(ctx context.Context, rc *redis.ClusterClient) error { return rc.Incr(ctx, "a").Err() },
			want: map[string]int{"a": 1},
		},
		"pipeline": {
			op: func(ctx context.Context, rc *redis.ClusterClient) error {
				_, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
					p.Incr(ctx, "a")
					p.Incr(ctx, "b") // written, never read: may have run
					return nil
				})
				return err
			},
			want: map[string]int{"a": 1, "b": 0},
		},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			f := startFakeNode(t, "127.0.0.1:0", "", plan)
			rc := leanFakeClient(t, f.Addr())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			err := c.op(ctx, rc)
			if !redis.IsClusterDownError(err) {
				t.Errorf("got %v, want go-redis's last error, CLUSTERDOWN", err)
			}
			for k, v := range c.want {
				if got := f.Val(k); got != v {
					t.Errorf("%s = %d, want %d (%d writes)", k, got, v, f.Writes())
				}
			}
			if f.Writes() > 20 {
				t.Errorf("%d writes: sent again after go-redis's own attempts", f.Writes())
			}
		})
	}
}
