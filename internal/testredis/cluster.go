package testredis

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of real redis-server processes on loopback,
// one master per node and no replicas, made for one test.
type Cluster struct {
	// Addrs are the nodes' host:port, usable as cluster seeds.
	Addrs []string

	nodes []*node
}

// node is one redis-server process on loopback.
type node struct {
	addr string
	dir  string
	cmd  *exec.Cmd
	out  *lockedBuffer
	done chan struct{} // closed when the process has exited
}

// clusterStartTimeout bounds each stage of StartCluster: a node answering
// PING, redis-cli --cluster create, and the cluster reaching state ok. It
// also bounds how long any node started here may take to answer PING.
const clusterStartTimeout = 30 * time.Second

// StartCluster starts nodes redis-server processes with cluster mode on,
// each on a free loopback port with its own directory under t.TempDir(),
// joins them into one cluster with redis-cli --cluster create (no
// replicas), and returns when every node reports cluster_state:ok, all
// 16384 slots assigned and every other node known. The processes are
// killed when the test ends.
//
// Without redis-server or redis-cli on PATH the test is skipped, or fails
// when LETTAQ_REQUIRE_REDIS=1.
func StartCluster(t testing.TB, nodes int) *Cluster {
	t.Helper()
	if nodes < 3 {
		t.Fatalf("testredis: a Redis Cluster needs at least 3 masters, not %d", nodes)
	}
	server, cli := lookTool(t, "redis-server"), lookTool(t, "redis-cli")
	c := &Cluster{}
	t.Cleanup(c.stop)
	root := t.TempDir()
	for i := range nodes {
		n, err := startClusterNode(server, filepath.Join(root, fmt.Sprintf("node%d", i)))
		if err != nil {
			t.Fatalf("testredis: cluster node %d: %v", i, err)
		}
		c.nodes = append(c.nodes, n)
		c.Addrs = append(c.Addrs, n.addr)
	}

	ctx, cancel := context.WithTimeout(context.Background(), clusterStartTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	if out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput(); err != nil {
		t.Fatalf("testredis: redis-cli %s: %v\n%s%s", strings.Join(args, " "), err, out, c.logs())
	}

	if err := c.waitReady(nodes); err != nil {
		t.Fatalf("testredis: cluster %v: %v%s", c.Addrs, err, c.logs())
	}
	return c
}

// Client returns a go-redis cluster client on the seeds; it is closed when
// the test ends.
func (c *Cluster) Client(t testing.TB) *redis.ClusterClient {
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	t.Cleanup(func() { _ = rc.Close() })
	return rc
}

func lookTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	if err != nil {
		if Required() {
			t.Fatalf("testredis: LETTAQ_REQUIRE_REDIS=1 but %s is not on PATH: %v", name, err)
		}
		t.Skipf("testredis: %s is not on PATH (needed to start a Redis of the test's own)", name)
	}
	return p
}

// startClusterNode starts one node on a free port, retrying with other
// ports when the one picked was taken meanwhile.
func startClusterNode(server, dir string) (*node, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freeClusterPort()
		if err != nil {
			return nil, err
		}
		var n *node
		n, lastErr = startNode(server, port, dir,
			"--cluster-enabled", "yes",
			"--cluster-config-file", filepath.Join(dir, "nodes.conf"),
			"--save", "",
			"--appendonly", "no",
		)
		if lastErr == nil {
			return n, nil
		}
		// A fresh nodes.conf for the next try: the old one names the old port.
		_ = os.Remove(filepath.Join(dir, "nodes.conf"))
	}
	return nil, lastErr
}

// startNode starts redis-server on 127.0.0.1:port with dir as its working
// directory and the extra arguments, and returns once it answers PING. A
// node that does not is killed.
func startNode(server string, port int, dir string, args ...string) (*node, error) {
	n := &node{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir,
		out: &lockedBuffer{}, done: make(chan struct{})}
	n.cmd = exec.Command(server, append([]string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", dir,
		"--daemonize", "no",
	}, args...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", server, err)
	}
	go func() { _ = n.cmd.Wait(); close(n.done) }()
	if err := n.waitPing(); err != nil {
		n.kill()
		return nil, fmt.Errorf("%w\n%s", err, n.out.String())
	}
	return n, nil
}

// freeClusterPort returns a loopback port that is free, and whose cluster
// bus port (port+10000) is free too.
func freeClusterPort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		if port+10000 > 65535 {
			_ = l.Close()
			continue
		}
		bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port+10000)))
		_ = l.Close()
		if err != nil {
			continue
		}
		_ = bus.Close()
		return port, nil
	}
	return 0, errors.New("no free loopback port pair (port, port+10000)")
}

// waitPing polls the node until it answers PING, it exits, or the time is up.
func (n *node) waitPing() error {
	rc := redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rc.Close()
	return poll(clusterStartTimeout, func(ctx context.Context) (bool, error) {
		select {
		case <-n.done:
			return false, fmt.Errorf("redis-server on %s exited: %s", n.addr, n.cmd.ProcessState)
		default:
		}
		return rc.Ping(ctx).Err() == nil, nil
	})
}

// waitReady polls CLUSTER INFO on every node until all agree the cluster is
// whole.
func (c *Cluster) waitReady(nodes int) error {
	clients := make([]*redis.Client, len(c.nodes))
	for i, n := range c.nodes {
		clients[i] = redis.NewClient(&redis.Options{Addr: n.addr, MaxRetries: -1})
		defer clients[i].Close()
	}
	var last string
	err := poll(clusterStartTimeout, func(ctx context.Context) (bool, error) {
		for i, rc := range clients {
			select {
			case <-c.nodes[i].done:
				return false, fmt.Errorf("redis-server on %s exited: %s", c.nodes[i].addr, c.nodes[i].cmd.ProcessState)
			default:
			}
			info, err := rc.ClusterInfo(ctx).Result()
			if err != nil {
				last = fmt.Sprintf("%s: %v", c.nodes[i].addr, err)
				return false, nil
			}
			f := parseInfo(info)
			if f["cluster_state"] != "ok" || f["cluster_slots_assigned"] != "16384" ||
				f["cluster_slots_ok"] != "16384" || f["cluster_known_nodes"] != strconv.Itoa(nodes) {
				last = fmt.Sprintf("%s: state %s, slots assigned %s ok %s, known nodes %s", c.nodes[i].addr,
					f["cluster_state"], f["cluster_slots_assigned"], f["cluster_slots_ok"], f["cluster_known_nodes"])
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil && last != "" {
		err = fmt.Errorf("%w (last seen: %s)", err, last)
	}
	return err
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

// poll calls f every 20ms until it reports done or an error, or timeout
// passes.
func poll(timeout time.Duration, f func(ctx context.Context) (bool, error)) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		done, err := f(ctx)
		cancel()
		if err != nil {
			return err
		}
		if done {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready within %v", timeout)
		}
		<-tick.C
	}
}

func (n *node) kill() {
	_ = n.cmd.Process.Kill()
	<-n.done
}

func (c *Cluster) stop() {
	for _, n := range c.nodes {
		n.kill()
	}
}

// logs returns the nodes' output, for a failure message.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "\n--- redis-server %s ---\n%s", n.addr, n.out.String())
	}
	return b.String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
