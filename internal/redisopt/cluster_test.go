package redisopt

import (
	"context"
	"net"
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
	c, rc, victim, key := leanClusterOnAMaster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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

// A lean cluster client rides out a killed master: a write to its slot
// sent after the kill, while connecting to it is refused and the cluster
// answers CLUSTERDOWN (go-redis alone returns that within ~0.1s), waits
// until the replica is promoted and the client routes there, and runs
// once.
func TestLeanClusterClientRidesOutAKilledMaster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster")
	}
	c, rc, victim, key := leanClusterOnAMaster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := rc.Set(ctx, key, 0, 0).Err(); err != nil { // the client's map now routes the slot to victim
		t.Fatal(err)
	}
	direct := redis.NewClient(&redis.Options{Addr: victim.Addr, MaxRetries: -1})
	if n, err := direct.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n < 1 { // the replica has the 0
		t.Fatalf("WAIT for the replica: %d, %v", n, err)
	}
	_ = direct.Close()

	killed := make(chan error, 1)
	go func() {
		_, err := c.KillMaster(ctx, victim.Addr)
		killed <- err
	}()
	for { // until the victim is gone
		conn, err := net.DialTimeout("tcp", victim.Addr, time.Second)
		if err != nil {
			break
		}
		_ = conn.Close()
		time.Sleep(5 * time.Millisecond)
	}
	t0 := time.Now()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	n, err := rc.Incr(wctx, key).Result()
	wcancel()
	took := time.Since(t0)
	if err := <-killed; err != nil {
		t.Fatal(err)
	}
	if err != nil {
		t.Fatalf("INCR sent while the master was down: %v after %v", err, took.Round(time.Millisecond))
	}
	if got, err := rc.Get(ctx, key).Int(); err != nil || n != 1 || got != 1 {
		t.Fatalf("INCR returned %d and the key holds %d (%v), want 1 and 1: once", n, got, err)
	}
	t.Logf("the INCR sent while the master was down ran %v later", took.Round(time.Millisecond))
}

// leanClusterOnAMaster starts a 6-node Cluster and a lean client on it, and
// names a master and a key in the first slot it owns.
func leanClusterOnAMaster(t *testing.T) (*rediscluster.Cluster, *redis.ClusterClient, rediscluster.Node, string) {
	t.Helper()
	c := rediscluster.Start(t, rediscluster.Config{})
	rc := Lean(asynq.RedisClusterClientOpt{Addrs: c.Seeds()}).MakeRedisClient().(*redis.ClusterClient)
	t.Cleanup(func() { _ = rc.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	masters, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := masters[0]
	return c, rc, victim, rediscluster.NameInSlot("lean:", victim.Slots[0][0])
}
