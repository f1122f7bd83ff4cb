package integration

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/bench/capacity"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

const (
	retentionMemoryEnv      = "LETTAQ_BENCH_RETENTION_MEMORY"
	retentionMemoryDefaults = "rate=20,retention=20s,periods=5"
)

// Redis memory under a steady load with every retention on, time scaled:
// each retention (the journal's, the reply streams', the replies' markers,
// the ordering's markers, Asynq's) is set to a few seconds, standing for
// days, and new turns (each a new chat's: a new reply stream apiece) arrive
// at a fixed rate for several retentions. Memory must level off at about
// the capacity plan's prediction (capacity.RetainedBytes, every retention
// the scaled one), not grow with time, and fall back once the load stops;
// the level over the prediction is the plan's RedisMemoryOverhead. On a redis-server of its own;
// run with LETTAQ_BENCH_RETENTION_MEMORY=1 (or "rate=50,retention=30s,periods=6"):
//
//	LETTAQ_BENCH_RETENTION_MEMORY=1 go test -count=1 -run TestRetentionMemoryLevelsOff -v ./integration/
func TestRetentionMemoryLevelsOff(t *testing.T) {
	spec := os.Getenv(retentionMemoryEnv)
	if spec == "" {
		t.Skip("set " + retentionMemoryEnv + "=1 to run (minutes)")
	}
	if spec == "1" {
		spec = retentionMemoryDefaults
	}
	rate, ret, periods := parseRetentionSpec(t, spec)
	srv := testredis.StartPersistent(t)
	e := newEnv(t, withRedis(srv.Server()))
	ctx := context.Background()
	ord := e.ordering()
	ord.Config.DoneTTL, ord.Config.MergedTTL = ret, ret
	ropts := queue.RepliesOptions{Prefix: e.prefix, TTL: ret, StreamTTL: ret}
	replies := queue.NewReplies(e.rdb, ropts)
	client, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: ret, Replies: replies, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = client.Close() })
	for _, id := range []string{"w1", "w2"} {
		e.startWorker(id, func(c *queue.WorkerConfig) {
			c.Stores.RepliesOptions = ropts
			c.Stores.JournalOptions = queue.JournalOptions{Prefix: e.prefix, Retention: ret}
			c.Ordering = ord
		})
	}
	agent := e.sim.CreateAgent("retention", nil)
	used := func() float64 {
		info := e.rdb.Info(ctx, "memory").Val()
		for _, l := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(l), "used_memory:"); ok {
				n, _ := strconv.ParseFloat(v, 64)
				return n
			}
		}
		t.Fatal("INFO memory has no used_memory")
		return 0
	}
	keys := func() int64 { return e.rdb.DBSize(ctx).Val() }
	time.Sleep(2 * time.Second) // the workers' own keys written
	base, baseKeys := used(), keys()
	plan := capacity.Defaults
	plan.TaskRetention, plan.JournalRetention, plan.MarkerRetention = ret, ret, ret
	predicted := capacity.RetainedBytes(capacity.Measured, plan, rate)
	t.Logf("baseline %.2f MiB, %d keys; load %.0f new turns/s (a new chat each), every retention %v, for %d retentions; plan: %.2f MiB retained (the keys' bytes, before Redis's overhead)",
		base/(1<<20), baseKeys, rate, ret, periods, predicted/(1<<20))

	tick := time.NewTicker(time.Duration(float64(time.Second) / rate))
	defer tick.Stop()
	sample := time.NewTicker(ret / 4)
	defer sample.Stop()
	start := time.Now()
	end := start.Add(time.Duration(periods) * ret)
	var lastPeriod []float64 // the samples of the last retention of the load
	n := 0
	for now := time.Now(); now.Before(end); now = time.Now() {
		select {
		case <-tick.C:
			n++
			m := queue.Message{AgentID: agent, Conversation: record.Conversation{Integration: "load", ChatID: fmt.Sprintf("chat-%d", n)},
				MessageID: "m", Text: "hi"}
			if _, err := client.Enqueue(ctx, m); err != nil {
				t.Fatalf("enqueue %d: %v", n, err)
			}
		case <-sample.C:
			u := used()
			t.Logf("t=%5.1fs (%.1f retentions) used %.2f MiB above baseline, %d keys", time.Since(start).Seconds(),
				time.Since(start).Seconds()/ret.Seconds(), (u-base)/(1<<20), keys()-baseKeys)
			if time.Until(end) < ret {
				lastPeriod = append(lastPeriod, u-base)
			}
		}
	}
	level := 0.0
	for _, u := range lastPeriod {
		level = max(level, u)
	}
	t.Logf("%d turns in %v; level over the last retention: at most %.2f MiB above baseline, against the plan's %.2f MiB: %.2f× (the plan's Redis overhead: %.2f×)",
		n, time.Since(start).Round(time.Second), level/(1<<20), predicted/(1<<20), level/predicted, capacity.Measured.RedisMemoryOverhead)
	// Asynq's janitor deletes a finished task up to 8 s after its retention:
	// wait that too.
	wait := ret + 10*time.Second
	deadline := time.Now().Add(wait + 10*time.Second)
	for ; ; time.Sleep(time.Second) {
		u, k := used(), keys()
		if k-baseKeys < int64(rate) || time.Now().After(deadline) {
			t.Logf("load stopped %v ago: used %.2f MiB above baseline, %d keys", time.Since(end).Round(time.Second), (u-base)/(1<<20), k-baseKeys)
			if k-baseKeys >= int64(rate) {
				t.Errorf("%d keys above baseline %v after the load stopped: retention does not empty Redis", k-baseKeys, wait)
				printKeySample(t, e.rdb)
			}
			break
		}
	}
	if level > 2*predicted {
		t.Errorf("memory levelled at %.2f MiB, over twice the plan's %.2f MiB", level/(1<<20), predicted/(1<<20))
	}
}

func parseRetentionSpec(t *testing.T, spec string) (rate float64, ret time.Duration, periods int) {
	t.Helper()
	for _, kv := range strings.Split(spec, ",") {
		k, v, _ := strings.Cut(kv, "=")
		var err error
		switch k {
		case "rate":
			rate, err = strconv.ParseFloat(v, 64)
		case "retention":
			ret, err = time.ParseDuration(v)
		case "periods":
			periods, err = strconv.Atoi(v)
		default:
			err = fmt.Errorf("unknown key %q", k)
		}
		if err != nil {
			t.Fatalf("%s=%q: %v (want e.g. %q)", retentionMemoryEnv, spec, err, retentionMemoryDefaults)
		}
	}
	if rate <= 0 || ret <= 0 || periods < 2 {
		t.Fatalf("%s=%q: want rate > 0, retention > 0 and periods ≥ 2", retentionMemoryEnv, spec)
	}
	return rate, ret, periods
}

// printKeySample logs a few of the keys left.
func printKeySample(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	keys, _, _ := rdb.Scan(ctx, 0, "*", 50).Result()
	for _, k := range keys {
		t.Logf("left: %s (TTL %v)", k, rdb.PTTL(ctx, k).Val())
	}
}
