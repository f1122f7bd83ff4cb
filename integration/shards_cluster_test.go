package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/integration/rediscluster"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// TestShardsOnCluster: a 6-node Redis Cluster (3 masters, 3 replicas), 16 shards, three
// workers, 1,000 chats × 3 messages: every turn answered once, in order per chat, and the turns'
// Asynq tasks, all keys and all commands fall on the three masters within 33% ± 10% each: a
// chat's reply stream, journal and markers live in its shard's slot.
func TestShardsOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster (skipped with -short)")
	}
	c := rediscluster.Start(t, rediscluster.Config{})
	ctx := context.Background()
	conn := asynq.RedisClusterClientOpt{Addrs: c.Seeds()}
	rdb := c.Client(t)
	const shards, chats, per, workers = 16, 1000, 3, 3
	const base = "lettaq-shards"
	sim := lettasim.NewServer(lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: simScale})
	t.Cleanup(sim.Close)
	b := testBudget()
	layout, _ := shard.New(shards, base, clusterPrefix)
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: clusterPrefix, Shards: layout})
	ord := queue.Ordering{Config: ordering.Config{Prefix: queue.OrderingPrefix(clusterPrefix)}}
	client, err := queue.NewClient(queue.ClientConfig{Redis: conn, Budget: b, Queue: base, Shards: shards, Replies: replies, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	e := &env{t: t, queue: base, prefix: clusterPrefix, sim: sim, budget: b, client: client, replies: replies, shards: shards}
	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	runCtx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for i := range workers {
		w, err := queue.NewWorker(queue.WorkerConfig{Redis: conn, Letta: queue.LettaConnection{URL: sim.URL}, Budget: b, Concurrency: 50,
			Queues: map[string]int{base: 1}, Shards: shards, ShutdownTimeout: 3 * time.Second,
			Logger: testLogger(t).With("worker", i), WorkerID: fmt.Sprintf("w%d", i),
			Stores: queue.WorkerStores{RedisClient: rdb,
				RepliesOptions: queue.RepliesOptions{Prefix: clusterPrefix}, JournalOptions: queue.JournalOptions{Prefix: clusterPrefix}},
			Timing:     queue.WorkerTiming{TaskCheckInterval: 50 * time.Millisecond, DelayedTaskCheckInterval: 200 * time.Millisecond},
			Ordering:   ord,
			ThreadMode: queue.ThreadAgent})
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(runCtx) }()
	}
	agents := make([]string, chats)
	cs := make([]record.Conversation, chats)
	marks := make([][]string, chats)
	res := make([][]queue.EnqueueResult, chats)
	for k := range chats {
		agents[k] = sim.CreateAgent(fmt.Sprintf("cl-%d", k), nil)
		cs[k] = record.Conversation{Integration: "test", ChatID: fmt.Sprintf("chat-%d", k)} // (a cluster of its own: the same shares every run)
	}
	t0 := time.Now()
	for i := range per {
		for k := range chats {
			mark := fmt.Sprintf("c%03d-m%d", k, i)
			res[k] = append(res[k], e.enqueue(queue.Message{AgentID: agents[k], Conversation: cs[k], MessageID: mark,
				Text: fmt.Sprintf("[[sim think=%s answer=%s]] %s", simDur(20*time.Millisecond), mark, mark)}))
			marks[k] = append(marks[k], mark)
		}
	}
	for k := range chats {
		for i, r := range res[k] {
			if final, _ := e.waitFinal(cs[k], r.TaskID, 60*time.Second); final.Type != record.EventAnswer || final.Text != marks[k][i] {
				t.Fatalf("chat %d message %d: final %s %q", k, i, final.Type, final.Text)
			}
		}
		checkOrder(t, sim, agents[k], marks[k])
	}
	took := time.Since(t0)
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tasks := make([]int64, len(stats))
	for i, m := range stats {
		tasks[i] = countKeys(t, m.Addr, "asynq:{"+base+"-*}:t:*")
	}
	for i, share := range rediscluster.Shares(tasks) {
		if share < 0.23 || share > 0.43 {
			t.Errorf("master %s holds %d of the tasks (%.0f%%), not 33%% ± 10%% (shards %q)", stats[i].Addr, tasks[i], 100*share, layout.Queues())
		}
	}
	for what, shares := range map[string][]float64{"keys": rediscluster.KeyShares(stats), "commands": rediscluster.CommandShares(stats)} {
		for i, share := range shares {
			if share < 0.23 || share > 0.43 {
				t.Errorf("master %s holds %.0f%% of the %s, not 33%% ± 10%%", stats[i].Addr, 100*share, what)
			}
		}
	}
	t.Logf("%d turns in %v; per master: tasks %v (shares %.2f), all keys %.2f, commands %.2f", chats*per, took.Round(time.Millisecond),
		tasks, rediscluster.Shares(tasks), rediscluster.KeyShares(stats), rediscluster.CommandShares(stats))
}

// countKeys counts the keys matching pattern on one node.
func countKeys(t *testing.T, addr, pattern string) int64 {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	var n int64
	iter := rc.Scan(context.Background(), 0, pattern, 1000).Iterator()
	for iter.Next(context.Background()) {
		n++
	}
	if err := iter.Err(); err != nil {
		t.Fatalf("scan %s: %v", addr, err)
	}
	return n
}
