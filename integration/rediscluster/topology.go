package rediscluster

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Node is one node as CLUSTER NODES shows it.
type Node struct {
	ID   string
	Addr string // host:port
	// Master is set for a master; MasterID names a replica's master.
	Master   bool
	MasterID string
	// Failed: the node is flagged fail (or fail?, or has no address).
	Failed bool
	// Slots are the slot ranges it serves, [first, last] each.
	Slots [][2]int
}

// Serves reports whether n serves slot.
func (n Node) Serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// readNodes parses CLUSTER NODES as the node rc reaches sees them.
func readNodes(ctx context.Context, rc *redis.Client) ([]Node, error) {
	text, err := rc.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out []Node
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		flags := strings.Split(f[2], ",")
		n := Node{ID: f[0], Addr: addr, Master: slices.Contains(flags, "master"),
			Failed: slices.Contains(flags, "fail") || slices.Contains(flags, "fail?") ||
				slices.Contains(flags, "noaddr") || f[7] == "disconnected"}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") { // a slot being imported or migrated
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES slots %q", s)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// Nodes returns the cluster's nodes as a running node sees them, ordered by
// address.
func (c *Cluster) Nodes(ctx context.Context) ([]Node, error) {
	var lastErr error
	for _, addr := range c.live() {
		rc := node(addr)
		nodes, err := readNodes(ctx, rc)
		_ = rc.Close()
		if err == nil {
			slices.SortFunc(nodes, func(a, b Node) int { return strings.Compare(a.Addr, b.Addr) })
			return nodes, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("rediscluster: no node answers CLUSTER NODES: %v", lastErr)
}

// Masters returns the masters serving slots, ordered by address.
func (c *Cluster) Masters(ctx context.Context) ([]Node, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	var out []Node
	for _, n := range nodes {
		if n.Master && !n.Failed && len(n.Slots) > 0 {
			out = append(out, n)
		}
	}
	return out, nil
}

// MasterOf returns the master serving slot.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (Node, error) {
	ms, err := c.Masters(ctx)
	if err != nil {
		return Node{}, err
	}
	for _, m := range ms {
		if m.Serves(slot) {
			return m, nil
		}
	}
	return Node{}, fmt.Errorf("rediscluster: no master serves slot %d", slot)
}

// lookup returns the node at addr.
func lookup(nodes []Node, addr string) (Node, error) {
	i := slices.IndexFunc(nodes, func(n Node) bool { return n.Addr == addr })
	if i < 0 {
		return Node{}, fmt.Errorf("rediscluster: no node %s", addr)
	}
	return nodes[i], nil
}

// find returns the node at addr and one replica of it that is up.
func find(nodes []Node, addr string) (n, replica Node, err error) {
	if n, err = lookup(nodes, addr); err != nil {
		return Node{}, Node{}, err
	}
	for _, r := range nodes {
		if r.MasterID == n.ID && !r.Failed {
			return n, r, nil
		}
	}
	return n, Node{}, fmt.Errorf("rediscluster: %s has no replica that is up", addr)
}

func sorted(s []string) []string { slices.Sort(s); return s }
