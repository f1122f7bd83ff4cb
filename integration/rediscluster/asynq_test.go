package rediscluster

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
)

// TestAsynqQueuesSpread: 16 Asynq queues whose names put them in slots
// spread evenly over the slot space (Asynq hash-tags each queue's keys with
// its name) share the three masters' keys and commands within 1/3 ± 0.10,
// while tasks wait, while they are worked off and while the server idles;
// every task runs once.
func TestAsynqQueuesSpread(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	conn := asynq.RedisClusterClientOpt{Addrs: c.Seeds()}
	const nq, per = 16, 20
	queues := map[string]int{}
	var names []string
	for i := range nq {
		name := NameInSlot("q", (2*i+1)*Slots/(2*nq))
		queues[name] = 1
		names = append(names, name)
	}
	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	client := asynq.NewClient(conn)
	defer client.Close()
	for _, q := range names {
		for range per {
			if _, err := client.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q)); err != nil {
				t.Fatal(err)
			}
		}
	}
	shares := func(what string) {
		t.Helper()
		stats, err := c.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		keys, cmds := KeyShares(stats), CommandShares(stats)
		for i, s := range stats {
			t.Logf("%s: %s: %d keys (%.1f%%), %d commands (%.1f%%)", what, s.Addr, s.Keys, 100*keys[i], s.Commands(), 100*cmds[i])
			if math.Abs(cmds[i]-1.0/3) > 0.10 || (s.Keys > 10 && math.Abs(keys[i]-1.0/3) > 0.10) {
				t.Errorf("%s: %s has %.1f%% of the keys and %.1f%% of the commands, want 1/3 ± 0.10", what, s.Addr,
					100*keys[i], 100*cmds[i])
			}
		}
	}
	shares("enqueued")

	var mu sync.Mutex
	seen := map[string]int{}
	done := make(chan struct{})
	srv := asynq.NewServer(conn, asynq.Config{Concurrency: 8, Queues: queues, TaskCheckInterval: 100 * time.Millisecond,
		LogLevel: asynq.ErrorLevel})
	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		mu.Lock()
		defer mu.Unlock()
		seen[id]++
		if len(seen) == nq*per {
			close(done)
		}
		return nil
	})); err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("%d of %d tasks ran within 60s", len(seen), nq*per)
	}
	shares("worked off")
	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	shares("idle")
	mu.Lock()
	defer mu.Unlock()
	for id, n := range seen {
		if n != 1 {
			t.Errorf("task %s ran %d times", id, n)
		}
	}
}
