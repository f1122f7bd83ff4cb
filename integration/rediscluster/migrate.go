package rediscluster

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// MigrateOptions tune MigrateSlot; the zero value is the default.
type MigrateOptions struct {
	// Batch is how many keys one MIGRATE moves (default 100).
	Batch int
	// Pause is slept between two MIGRATEs: a test stretches the migration
	// to have its load meet the slot half moved.
	Pause time.Duration
}

// MigrateSlot moves slot from the master serving it to the master at to,
// the way redis-cli --cluster reshard does (see Migration), in batches of
// opt.Batch keys, and returns once every running node agrees the target
// serves slot and each of clients routes it there.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to string, opt MigrateOptions, clients ...*redis.ClusterClient) error {
	if opt.Batch <= 0 {
		opt.Batch = 100
	}
	m, err := c.StartMigration(ctx, slot, to)
	if err != nil {
		return err
	}
	defer m.Close()
	for {
		n, err := m.MoveBatch(ctx, opt.Batch)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
		if opt.Pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(opt.Pause):
			}
		}
	}
	return m.Finish(ctx, clients...)
}

// Migration is a slot on its way from one master to another: between
// StartMigration and Finish the source answers a command on a key it no
// longer has with ASK (the client repeats it on the target after ASKING),
// and a command or script whose declared keys are split between the two
// with TRYAGAIN. Close it when done.
type Migration struct {
	c          *Cluster
	slot       int
	src, dst   Node
	srcC, dstC *redis.Client
	others     []string // the other masters, told at Finish
}

// StartMigration marks slot as importing on the master at to and migrating
// on the master serving it (CLUSTER SETSLOT … IMPORTING, then … MIGRATING).
func (c *Cluster) StartMigration(ctx context.Context, slot int, to string) (*Migration, error) {
	src, err := c.MasterOf(ctx, slot)
	if err != nil {
		return nil, err
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return nil, err
	}
	dst, err := lookup(nodes, to)
	if err != nil {
		return nil, err
	}
	if !dst.Master || dst.Failed || dst.Addr == src.Addr {
		return nil, fmt.Errorf("rediscluster: cannot move slot %d from %s to %s (not another master that is up)", slot, src.Addr, to)
	}
	m := &Migration{c: c, slot: slot, src: src, dst: dst, srcC: node(src.Addr), dstC: node(dst.Addr)}
	for _, n := range nodes {
		if n.Master && !n.Failed && n.Addr != src.Addr && n.Addr != dst.Addr {
			m.others = append(m.others, n.Addr)
		}
	}
	if err := m.setslot(ctx, m.dstC, "importing", src.ID); err != nil {
		m.Close()
		return nil, err
	}
	if err := m.setslot(ctx, m.srcC, "migrating", dst.ID); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Source and Target are the masters the slot moves from and to.
func (m *Migration) Source() Node { return m.src }

// Target is the master the slot moves to.
func (m *Migration) Target() Node { return m.dst }

func (m *Migration) setslot(ctx context.Context, rc *redis.Client, args ...any) error {
	a := append([]any{"cluster", "setslot", m.slot}, args...)
	if err := rc.Do(ctx, a...).Err(); err != nil {
		return fmt.Errorf("rediscluster: CLUSTER SETSLOT %d %v on %s: %w", m.slot, args, rc.Options().Addr, err)
	}
	return nil
}

// Move migrates keys (of the slot) to the target with one MIGRATE … KEYS.
// Keys the source no longer has are skipped.
func (m *Migration) Move(ctx context.Context, keys ...string) error {
	if len(keys) == 0 {
		return nil
	}
	host, port, _ := strings.Cut(m.dst.Addr, ":")
	args := []any{"migrate", host, port, "", 0, 5000, "replace", "keys"}
	for _, k := range keys {
		args = append(args, k)
	}
	// NOKEY: none of the keys is on the source (expired, deleted or moved).
	if err := m.srcC.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
		return fmt.Errorf("rediscluster: MIGRATE of %d keys of slot %d to %s: %w", len(keys), m.slot, m.dst.Addr, err)
	}
	return nil
}

// MoveBatch migrates up to n of the keys the source still holds in the
// slot (CLUSTER GETKEYSINSLOT, MIGRATE) and returns how many it found: 0
// once the source holds none.
func (m *Migration) MoveBatch(ctx context.Context, n int) (int, error) {
	keys, err := m.srcC.ClusterGetKeysInSlot(ctx, m.slot, n).Result()
	if err != nil {
		return 0, fmt.Errorf("rediscluster: CLUSTER GETKEYSINSLOT %d on %s: %w", m.slot, m.src.Addr, err)
	}
	return len(keys), m.Move(ctx, keys...)
}

// Finish moves the keys left and gives the slot to the target: CLUSTER
// SETSLOT … NODE on the target first (it must accept the slot before the
// source redirects there with MOVED), then on the source and the other
// masters. It returns once every running node agrees and each of clients
// routes the slot to the target.
func (m *Migration) Finish(ctx context.Context, clients ...*redis.ClusterClient) error {
	for {
		n, err := m.MoveBatch(ctx, 100)
		if err != nil {
			return err
		}
		if n == 0 {
			break
		}
	}
	if err := m.setslot(ctx, m.dstC, "node", m.dst.ID); err != nil {
		return err
	}
	if err := m.setslot(ctx, m.srcC, "node", m.dst.ID); err != nil {
		return err
	}
	for _, addr := range m.others {
		rc := node(addr)
		err := m.setslot(ctx, rc, "node", m.dst.ID)
		_ = rc.Close()
		if err != nil {
			return err
		}
	}
	return m.c.waitPromoted(ctx, m.slot, m.dst.Addr, clients)
}

// Close releases the connections (it does not undo the migration).
func (m *Migration) Close() {
	_ = m.srcC.Close()
	_ = m.dstC.Close()
}
