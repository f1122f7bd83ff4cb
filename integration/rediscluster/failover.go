package rediscluster

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// Failover promotes master's replica with CLUSTER FAILOVER sent to the
// replica (the coordinated kind: the master stops taking writes until the
// replica has caught up, so nothing acknowledged is lost), and returns the
// promoted replica's address once every running node agrees it serves the
// old master's slots, the old master is its replica with its link up, and
// each of clients routes the slots to it.
func (c *Cluster) Failover(ctx context.Context, master string, clients ...*redis.ClusterClient) (string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	m, r, err := find(nodes, master)
	if err != nil {
		return "", err
	}
	if !m.Master || len(m.Slots) == 0 {
		return "", fmt.Errorf("rediscluster: %s is not a master serving slots", master)
	}
	rc := node(r.Addr)
	err = rc.ClusterFailover(ctx).Err()
	_ = rc.Close()
	if err != nil {
		return "", fmt.Errorf("rediscluster: CLUSTER FAILOVER on %s: %w", r.Addr, err)
	}
	return r.Addr, c.waitPromoted(ctx, m.Slots[0][0], r.Addr, clients)
}

// KillMaster sends SIGKILL to master and returns its replica's address
// once the cluster has failed the master over to it by itself (after
// cluster-node-timeout and the replica's election), every running node
// agrees, and each of clients routes the old master's slots to it. The
// killed node stays down. Writes the master acknowledged but had not yet
// sent to its replica are lost: Redis replicates asynchronously.
func (c *Cluster) KillMaster(ctx context.Context, master string, clients ...*redis.ClusterClient) (string, error) {
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return "", err
	}
	m, r, err := find(nodes, master)
	if err != nil {
		return "", err
	}
	if !m.Master || len(m.Slots) == 0 {
		return "", fmt.Errorf("rediscluster: %s is not a master serving slots", master)
	}
	c.mu.Lock()
	p := c.procs[master]
	c.mu.Unlock()
	p.kill()
	return r.Addr, c.waitPromoted(ctx, m.Slots[0][0], r.Addr, clients)
}

// waitPromoted waits until addr serves slot in the view of every running
// node, the cluster is healthy again, and clients route slot to addr.
func (c *Cluster) waitPromoted(ctx context.Context, slot int, addr string, clients []*redis.ClusterClient) error {
	err := poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
		for _, a := range c.live() {
			rc := node(a)
			nodes, err := readNodes(ctx, rc)
			_ = rc.Close()
			if err != nil {
				return false, nil
			}
			for _, n := range nodes {
				if n.Serves(slot) && (n.Addr != addr || !n.Master) {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("rediscluster: slot %d not served by %s: %w%s", slot, addr, err, c.Logs())
	}
	if err := c.waitHealthy(ctx); err != nil {
		return fmt.Errorf("rediscluster: after %s took slot %d: %w", addr, slot, err)
	}
	return waitClients(ctx, slot, addr, clients)
}

// waitClients waits until each client routes slot to addr, asking it to
// reload its view of the cluster (go-redis otherwise learns of a change from
// a MOVED reply, or every ClusterStateReloadInterval, a minute by default).
func waitClients(ctx context.Context, slot int, addr string, clients []*redis.ClusterClient) error {
	key := TagForSlot(slot)
	for _, cc := range clients {
		err := poll(ctx, startTimeout, func(ctx context.Context) (bool, error) {
			m, err := cc.MasterForKey(ctx, key)
			if err == nil && m.Options().Addr == addr {
				return true, nil
			}
			cc.ReloadState(ctx)
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("rediscluster: a client does not route slot %d to %s: %w", slot, addr, err)
		}
	}
	return nil
}
