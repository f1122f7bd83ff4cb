package rediscluster

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
)

// Config tunes the cluster Start makes; the zero value is the default.
type Config struct {
	// NodeTimeout is cluster-node-timeout: how long a master may not answer
	// before it is taken for failed and its replica promoted (default 1.5s;
	// Redis's own default is 15s). Below ~1s a busy machine risks failovers
	// nobody asked for.
	NodeTimeout time.Duration
	// Args are more redis-server arguments for every node (for example
	// "--appendonly", "yes" for a case that needs persistence).
	Args []string
}

// Cluster is a running Redis Cluster of six redis-server processes: three
// masters holding the 16384 slots, one replica each. Nodes keep their
// address for the test's life; their roles change with Failover, KillMaster
// and MigrateSlot.
type Cluster struct {
	seeds []string

	mu    sync.Mutex
	procs map[string]*process // by address; a killed one stays, exited
}

const (
	masters, replicasPerMaster = 3, 1
	// startTimeout bounds each stage of Start, and each wait of the
	// failover and migration helpers.
	startTimeout = 30 * time.Second
)

// Start starts the cluster and returns once every node reports
// cluster_state:ok with all 16384 slots served, knows all six nodes, and
// every replica's link to its master is up. Every process is killed (with a
// child it may have forked) and its directory removed when the test ends,
// whether it passed or not.
//
// Without redis-server or redis-cli on PATH the test is skipped, or fails
// when LETTAQ_REQUIRE_REDIS=1.
func Start(t testing.TB, cfg Config) *Cluster {
	t.Helper()
	server, cli := lookTool(t, "redis-server"), lookTool(t, "redis-cli")
	timeout := cfg.NodeTimeout
	if timeout <= 0 {
		timeout = 1500 * time.Millisecond
	}
	c := &Cluster{procs: map[string]*process{}}
	t.Cleanup(c.stop)
	root := t.TempDir()
	args := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.FormatInt(timeout.Milliseconds(), 10),
		// A replica cut off from its master for longer than the node
		// timeout times this factor refuses to be promoted; 0: always may.
		"--cluster-replica-validity-factor", "0",
		"--save", "",
		"--appendonly", "no",
		// Replicas sync at once (Redis waits 5s by default for more of them).
		"--repl-diskless-sync-delay", "0",
	}, cfg.Args...)
	for i := range masters * (1 + replicasPerMaster) {
		p, err := startProcess(server, filepath.Join(root, fmt.Sprintf("node%d", i)), args)
		if err != nil {
			t.Fatalf("rediscluster: node %d: %v", i, err)
		}
		c.procs[p.addr] = p
		c.seeds = append(c.seeds, p.addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	create := append([]string{"--cluster", "create"}, c.seeds...)
	create = append(create, "--cluster-replicas", strconv.Itoa(replicasPerMaster), "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, create...).CombinedOutput(); err != nil {
		t.Fatalf("rediscluster: redis-cli %s: %v\n%s%s", strings.Join(create, " "), err, out, c.Logs())
	}
	if err := c.waitHealthy(context.Background()); err != nil {
		t.Fatalf("rediscluster: cluster %v: %v%s", c.seeds, err, c.Logs())
	}
	return c
}

func lookTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if testredis.Required() {
			t.Fatalf("rediscluster: LETTAQ_REQUIRE_REDIS=1 but %s is not on PATH: %v", name, err)
		}
		t.Skipf("rediscluster: %s is not on PATH (needed to start a Redis Cluster)", name)
	}
	return p
}

// Seeds returns every node's host:port, for go-redis ClusterOptions.Addrs
// or asynq.RedisClusterClientOpt.Addrs.
func (c *Cluster) Seeds() []string { return append([]string(nil), c.seeds...) }

// Client returns a go-redis ClusterClient on the seeds with default
// options; it is closed when the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Seeds()})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

// live returns the addresses of the processes still running.
func (c *Cluster) live() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, a := range c.seeds {
		if !c.procs[a].exited() {
			out = append(out, a)
		}
	}
	return out
}

// node returns a client on one node (closed by the caller).
func node(addr string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
}

// waitHealthy polls the running nodes until each of them reports
// cluster_state:ok with every slot served, knows every running node and
// sees three masters each holding slots and every other node a replica,
// every replica's link is up, and all agree on who serves which slot and
// which master each replica follows.
func (c *Cluster) waitHealthy(ctx context.Context) error {
	var last string
	err := poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		live := c.live()
		var agreed string
		for _, addr := range live {
			rc := node(addr)
			ok, why, view := healthyFrom(ctx, rc, len(live))
			_ = rc.Close()
			if !ok {
				last = addr + ": " + why
				return false, nil
			}
			if agreed == "" {
				agreed = view
			} else if view != agreed {
				last = fmt.Sprintf("%s sees the slots as %s, another node as %s", addr, view, agreed)
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("cluster not healthy: %w (last seen: %s)", err, last)
	}
	return nil
}

// healthyFrom tells whether the node rc reaches sees a healthy cluster of
// live nodes, and returns its view of the slots' masters.
func healthyFrom(ctx context.Context, rc *redis.Client, live int) (ok bool, why, view string) {
	info, err := rc.ClusterInfo(ctx).Result()
	if err != nil {
		return false, err.Error(), ""
	}
	f := parseInfo(info)
	if f["cluster_state"] != "ok" || f["cluster_slots_ok"] != "16384" {
		return false, fmt.Sprintf("state %s, slots ok %s", f["cluster_state"], f["cluster_slots_ok"]), ""
	}
	nodes, err := readNodes(ctx, rc)
	if err != nil {
		return false, err.Error(), ""
	}
	var connected, slotMasters int
	var views []string
	for _, n := range nodes {
		if n.Failed {
			continue
		}
		connected++
		switch {
		case n.Master && len(n.Slots) > 0:
			slotMasters++
			views = append(views, fmt.Sprintf("%s%v", n.Addr, n.Slots))
		case n.Master:
			return false, n.Addr + " is a master without slots, not yet a replica", ""
		default:
			views = append(views, fmt.Sprintf("%s>%s", n.Addr, n.MasterID))
		}
	}
	if connected != live || slotMasters != masters {
		return false, fmt.Sprintf("%d nodes up (want %d), %d masters with slots", connected, live, slotMasters), ""
	}
	if role, err := rc.Info(ctx, "replication").Result(); err != nil {
		return false, err.Error(), ""
	} else if r := parseInfo(role); r["role"] == "slave" && r["master_link_status"] != "up" {
		return false, "replica's link to its master is " + r["master_link_status"], ""
	}
	return true, "", strings.Join(sorted(views), " ")
}

// stop kills every process: the test's cleanup.
func (c *Cluster) stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		p.kill()
	}
}

// Logs returns every node's output, for a failure message.
func (c *Cluster) Logs() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, a := range c.seeds {
		if p := c.procs[a]; p != nil {
			fmt.Fprintf(&b, "\n--- redis-server %s ---\n%s", a, p.out.String())
		}
	}
	return b.String()
}

func parseInfo(s string) map[string]string {
	m := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			m[k] = v
		}
	}
	return m
}
