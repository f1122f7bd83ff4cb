package rediscluster

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestMain quiets go-redis's own log: the killed master's refused dials
// would fill the output.
func TestMain(m *testing.M) {
	redis.SetLogger(quiet{})
	os.Exit(m.Run())
}

type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func startOrSkip(t *testing.T) *Cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("starts a 6-node Redis Cluster (skipped with -short)")
	}
	t0 := time.Now()
	c := Start(t, Config{})
	t.Logf("cluster %v ready in %v", c.Seeds(), time.Since(t0).Round(time.Millisecond))
	return c
}

// TestStartAndShares: the cluster has three masters with one replica each
// covering every slot, and Stats counts each master's keys and commands
// exactly: as many as the keys written whose slot it serves (a SET and a
// GET each), nothing after ResetStats.
func TestStartAndShares(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 6 || len(ms) != 3 {
		t.Fatalf("%d nodes, %d masters serving slots; want 6 and 3: %+v", len(nodes), len(ms), nodes)
	}
	covered := 0
	for _, m := range ms {
		for _, r := range m.Slots {
			covered += r[1] - r[0] + 1
		}
		replicas := 0
		for _, n := range nodes {
			if n.MasterID == m.ID {
				replicas++
			}
		}
		if replicas != 1 {
			t.Errorf("master %s has %d replicas, want 1", m.Addr, replicas)
		}
	}
	if covered != Slots {
		t.Errorf("masters serve %d slots, want %d", covered, Slots)
	}

	rc := c.Client(t)
	if err := rc.Ping(ctx).Err(); err != nil { // the client learns the slots
		t.Fatal(err)
	}
	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 3000
	want := map[string]int64{}
	if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			k := fmt.Sprintf("share:%d", i)
			p.Set(ctx, k, i, 0)
			for _, m := range ms {
				if m.Serves(Slot(k)) {
					want[m.Addr]++
				}
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		if err := rc.Get(ctx, fmt.Sprintf("share:%d", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	stats, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	keyShares, cmdShares := KeyShares(stats), CommandShares(stats)
	for i, s := range stats {
		if s.Keys != want[s.Addr] || s.Commands() != 2*want[s.Addr] {
			t.Errorf("%s: %d keys, %d commands (%v); want %d and %d", s.Addr, s.Keys, s.Commands(), s.Calls,
				want[s.Addr], 2*want[s.Addr])
		}
		if s.Calls["set"] != want[s.Addr] || s.Calls["get"] != want[s.Addr] {
			t.Errorf("%s: %d SET, %d GET; want %d each", s.Addr, s.Calls["set"], s.Calls["get"], want[s.Addr])
		}
		if math.Abs(keyShares[i]-1.0/3) > 0.10 || math.Abs(cmdShares[i]-1.0/3) > 0.10 {
			t.Errorf("%s: key share %.3f, command share %.3f; want 1/3 ± 0.10", s.Addr, keyShares[i], cmdShares[i])
		}
		t.Logf("%s: %d keys (%.1f%%), %d commands (%.1f%%)", s.Addr, s.Keys, 100*keyShares[i], s.Commands(), 100*cmdShares[i])
	}

	if err := c.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	stats, err = c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range stats {
		if s.Commands() != 0 {
			t.Errorf("%s after ResetStats: %d commands (%v), want 0", s.Addr, s.Commands(), s.Calls)
		}
	}
}

// TestFailoverUnderLoad: CLUSTER FAILOVER on a master's replica while a
// load writes to every master; the load's client learns of the new master
// by itself (a MOVED reply), and no acknowledged write is lost.
func TestFailoverUnderLoad(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds()})
	t.Cleanup(func() { _ = rc.Close() })
	redirects := CountRedirects(rc)
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(rc, "failover", "", 4, 2*time.Millisecond)
	l.waitWrites(t, 200, 10*time.Second)
	t0 := time.Now()
	promoted, err := c.Failover(ctx, ms[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("failover of %s to %s: %v", ms[0].Addr, promoted, time.Since(t0).Round(time.Millisecond))
	l.waitWrites(t, 200, 10*time.Second)
	waitFor(t, "a MOVED reply", func() bool { return redirects.Counts().Moved > 0 })
	l.finish(t, c.Seeds())
	t.Logf("redirects: %+v", redirects.Counts())

	nodes, err := c.Nodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old, _ := lookup(nodes, ms[0].Addr)
	now, _ := lookup(nodes, promoted)
	if !now.Master || old.Master || old.MasterID != now.ID || !now.Serves(ms[0].Slots[0][0]) {
		t.Errorf("after the failover: %+v, %+v; want %s the master of %s, serving its slots", now, old, promoted, ms[0].Addr)
	}
}

// TestKillMasterUnderLoad: a master is SIGKILLed while a load writes to
// every master; its replica is promoted, the load's client routes the
// slots there by itself, and no acknowledged write is lost. The client
// reloads its view of the slots every second: with go-redis's default (a
// minute) it would go on dialling the dead master that long, as a dead node
// sends no MOVED.
func TestKillMasterUnderLoad(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds(), ClusterStateReloadInterval: time.Second})
	t.Cleanup(func() { _ = rc.Close() })
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l := startLoad(rc, "kill", "", 4, 2*time.Millisecond)
	l.waitWrites(t, 200, 10*time.Second)
	t0 := time.Now()
	promoted, err := c.KillMaster(ctx, ms[0].Addr)
	if err != nil {
		t.Fatal(err)
	}
	promotedAfter := time.Since(t0)
	probe := TagForSlot(ms[0].Slots[0][0]) + "probe"
	waitFor(t, "write to the killed master's slots", func() bool { return rc.Set(ctx, probe, 1, 0).Err() == nil })
	t.Logf("%s killed: %s promoted after %v, the load's client writes there after %v", ms[0].Addr, promoted,
		promotedAfter.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond))
	l.waitWrites(t, 200, 10*time.Second)
	l.finish(t, c.Seeds())

	if m, err := rc.MasterForKey(ctx, probe); err != nil || m.Options().Addr != promoted {
		t.Errorf("the client routes slot %d to %v (%v), want %s", ms[0].Slots[0][0], m, err, promoted)
	}
	if ms2, err := c.Masters(ctx); err != nil || len(ms2) != 3 || !ms2[slicesIndex(ms2, promoted)].Serves(ms[0].Slots[0][0]) {
		t.Errorf("masters after the kill: %+v (%v), want 3, %s serving slot %d", ms2, err, promoted, ms[0].Slots[0][0])
	}
}

func slicesIndex(ns []Node, addr string) int {
	for i, n := range ns {
		if n.Addr == addr {
			return i
		}
	}
	return 0
}

// TestMigrateSlotUnderLoad: a slot holding 3000 keys moves to another
// master while a load writes into it (and to every master) and a script
// increments two of its keys: go-redis follows ASK and repeats TRYAGAIN,
// no acknowledged write is lost, and each script call counted once.
func TestMigrateSlotUnderLoad(t *testing.T) {
	c := startOrSkip(t)
	ctx := context.Background()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds()})
	t.Cleanup(func() { _ = rc.Close() })
	redirects := CountRedirects(rc)
	ms, err := c.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	slot := ms[0].Slots[0][0] + 7
	tag := TagForSlot(slot)
	const preload = 3000
	if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range preload {
			p.Set(ctx, fmt.Sprintf("%spre:%d", tag, i), i, 0)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// Two counters of the slot a MIGRATE batch apart: the script's keys are
	// split between the nodes for a while.
	counters := []string{tag + "pre:0", tag + "pre:" + fmt.Sprint(preload-1)}
	incr := redis.NewScript(`redis.call("INCR", KEYS[1]) return redis.call("INCR", KEYS[2])`)
	scriptStop, scriptDone := make(chan struct{}), make(chan struct{})
	var scriptCalls, scriptFailed int64
	scriptErrs := map[string]int{}
	go func() {
		defer close(scriptDone)
		for {
			select {
			case <-scriptStop:
				return
			default:
			}
			if err := incr.Run(ctx, rc, counters).Err(); err != nil {
				scriptFailed++
				scriptErrs[strings.SplitN(err.Error(), " ", 2)[0]]++
				time.Sleep(5 * time.Millisecond)
				continue
			}
			scriptCalls++
			time.Sleep(2 * time.Millisecond)
		}
	}()

	l := startLoad(rc, "migrate", tag, 4, 2*time.Millisecond)
	l.waitWrites(t, 200, 10*time.Second)
	t0 := time.Now()
	if err := c.MigrateSlot(ctx, slot, ms[1].Addr, MigrateOptions{Batch: 50, Pause: 20 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	t.Logf("slot %d (%d keys and the load's) moved from %s to %s in %v", slot, preload, ms[0].Addr, ms[1].Addr,
		time.Since(t0).Round(time.Millisecond))
	l.waitWrites(t, 200, 10*time.Second)
	close(scriptStop)
	<-scriptDone
	writes := l.finish(t, c.Seeds())
	counts := redirects.Counts()
	t.Logf("redirects: %+v; script: %d calls acknowledged, %d failed after go-redis's retries %v", counts, scriptCalls,
		scriptFailed, scriptErrs)
	if counts.Ask == 0 {
		t.Error("no ASK reply: the load never met the slot half moved")
	}

	for _, k := range counters {
		if got, err := rc.Get(ctx, k).Int64(); err != nil || got != int64(preloadValue(k))+scriptCalls {
			t.Errorf("%s = %d (%v), want its preloaded value + %d script calls", k, got, err, scriptCalls)
		}
	}
	src, dst := node(ms[0].Addr), node(ms[1].Addr)
	defer src.Close()
	defer dst.Close()
	if n, err := src.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n != 0 {
		t.Errorf("the source still holds %d keys of slot %d (%v)", n, slot, err)
	}
	if n, err := dst.ClusterCountKeysInSlot(ctx, slot).Result(); err != nil || n < preload+int64(writes/4)-4 {
		t.Errorf("the target holds %d keys of slot %d (%v), want the %d preloaded and the load's", n, slot, err, preload)
	}
	if got, err := c.MasterOf(ctx, slot); err != nil || got.Addr != ms[1].Addr {
		t.Errorf("slot %d served by %+v (%v), want %s", slot, got, err, ms[1].Addr)
	}
}

// preloadValue is the value TestMigrateSlotUnderLoad preloaded at k.
func preloadValue(k string) int {
	var i int
	_, _ = fmt.Sscanf(k[strings.LastIndex(k, ":")+1:], "%d", &i)
	return i
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 10s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
