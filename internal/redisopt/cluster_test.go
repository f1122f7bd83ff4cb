package redisopt

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/rediscluster"
)

// A lean cluster client writes to a killed master's slots again soon after
// its replica is promoted: the dead master sends no MOVED, so with
// go-redis's default the client would keep its old slot map for a minute.
func TestLeanClusterClientFollowsAKilledMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster")
	}
	c := rediscluster.Start(t, rediscluster.Config{})
	rc := Lean(asynq.RedisClusterClientOpt{Addrs: c.Seeds()}).MakeRedisClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := masters[0]
	key := rediscluster.NameInSlot("lean:", victim.Slots[0][0])
	if err := rc.Set(ctx, key, "before", 0).Err(); err != nil { // the client's map now routes the slot to victim
		t.Fatal(err)
	}
	promoted, err := c.KillMaster(ctx, victim.Addr) // returns once the cluster agrees on the replica
	if err != nil {
		t.Fatal(err)
	}

	// go-redis's default keeps the dead address for 60s; the lean client
	// must have found the replica well before that.
	const bound = 4*ClusterStateReload + 10*time.Second
	deadline := time.Now().Add(bound)
	var last error
	for time.Now().Before(deadline) {
		wctx, wcancel := context.WithTimeout(ctx, time.Second)
		last = rc.Set(wctx, key, "after", 0).Err()
		wcancel()
		if last == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if last != nil {
		t.Fatalf("no write to the killed master's slot reached the promoted replica %s within %v: %v", promoted, bound, last)
	}
	got, err := redis.NewClient(&redis.Options{Addr: promoted}).Get(ctx, key).Result()
	if err != nil || got != "after" {
		t.Fatalf("promoted replica %s holds %q (%v), want %q", promoted, got, err, "after")
	}
}
