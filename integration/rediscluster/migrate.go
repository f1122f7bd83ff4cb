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
	// Batch is how many keys one MIGRATE moves (default 100, as redis-cli
	// --cluster reshard's --cluster-pipeline default is 10).
	Batch int
	// Pause is slept between two MIGRATEs: a test stretches the migration
	// to have its load meet the slot half moved.
	Pause time.Duration
}

// MigrateSlot moves slot from the master serving it to the master at to,
// the way redis-cli --cluster reshard does: CLUSTER SETSLOT … IMPORTING on
// the target, … MIGRATING on the source, MIGRATE of the slot's keys in
// batches until the source holds none, then CLUSTER SETSLOT … NODE on the
// target, the source and the other masters. Meanwhile the source answers a
// command on a key it no longer has with ASK (the client repeats it on the
// target after ASKING) and a command on several keys of which only some are
// still there with TRYAGAIN. It returns once every running node agrees the
// target serves slot and each of clients routes it there.
func (c *Cluster) MigrateSlot(ctx context.Context, slot int, to string, opt MigrateOptions, clients ...*redis.ClusterClient) error {
	if opt.Batch <= 0 {
		opt.Batch = 100
	}
	src, err := c.MasterOf(ctx, slot)
	if err != nil {
		return err
	}
	nodes, err := c.Nodes(ctx)
	if err != nil {
		return err
	}
	dst, err := lookup(nodes, to)
	if err != nil {
		return err
	}
	if !dst.Master || dst.Failed || dst.Addr == src.Addr {
		return fmt.Errorf("rediscluster: cannot move slot %d from %s to %s (not another master that is up)", slot, src.Addr, to)
	}
	srcC, dstC := node(src.Addr), node(dst.Addr)
	defer srcC.Close()
	defer dstC.Close()
	setslot := func(rc *redis.Client, args ...any) error {
		a := append([]any{"cluster", "setslot", slot}, args...)
		if err := rc.Do(ctx, a...).Err(); err != nil {
			return fmt.Errorf("rediscluster: CLUSTER SETSLOT %d %v on %s: %w", slot, args, rc.Options().Addr, err)
		}
		return nil
	}
	if err := setslot(dstC, "importing", src.ID); err != nil {
		return err
	}
	if err := setslot(srcC, "migrating", dst.ID); err != nil {
		return err
	}
	host, port, _ := strings.Cut(dst.Addr, ":")
	for {
		keys, err := srcC.ClusterGetKeysInSlot(ctx, slot, opt.Batch).Result()
		if err != nil {
			return fmt.Errorf("rediscluster: CLUSTER GETKEYSINSLOT %d on %s: %w", slot, src.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		args := []any{"migrate", host, port, "", 0, 5000, "replace", "keys"}
		for _, k := range keys {
			args = append(args, k)
		}
		// NOKEY: every key of the batch expired or was deleted meanwhile.
		if err := srcC.Do(ctx, args...).Err(); err != nil && !strings.Contains(err.Error(), "NOKEY") {
			return fmt.Errorf("rediscluster: MIGRATE of %d keys of slot %d to %s: %w", len(keys), slot, dst.Addr, err)
		}
		if opt.Pause > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(opt.Pause):
			}
		}
	}
	// The target first: once the source gives the slot up it redirects
	// there with MOVED, and the target must accept by then.
	if err := setslot(dstC, "node", dst.ID); err != nil {
		return err
	}
	if err := setslot(srcC, "node", dst.ID); err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Master && !n.Failed && n.Addr != src.Addr && n.Addr != dst.Addr {
			rc := node(n.Addr)
			err := setslot(rc, "node", dst.ID)
			_ = rc.Close()
			if err != nil {
				return err
			}
		}
	}
	return c.waitPromoted(ctx, slot, dst.Addr, clients)
}
