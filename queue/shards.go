package queue

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/shard"
)

// Shards: a deployment's chats spread over ClientConfig.Shards /
// WorkerConfig.Shards Asynq queues (package queue/shard). A Client enqueues
// each turn into its chat's shard's queue, under a task id that names the
// shard; a Worker takes turns from every shard's queue, with equal weights:
// every shard carries an equal share of the chats, so none is preferred.
// Both refuse to work under a layout other than the deployment's recorded
// one: they fail with a *shard.MismatchError (docs/operations.md,
// Changing the shard layout).

// shardLayouts are the layouts a worker or client works under: one per
// configured queue with one shard (each queue a deployment of its own, as
// before shards), or the one layout of a sharded queue.
func shardLayouts(n int, queues []string, prefix string) ([]shard.Layout, error) {
	n = max(n, 1)
	if n > 1 && len(queues) != 1 {
		return nil, fmt.Errorf("queue: with %d shards give one queue (the shards' base name), not %d", n, len(queues))
	}
	out := make([]shard.Layout, 0, len(queues))
	for _, q := range queues {
		l, err := shard.New(n, q, prefix)
		if err != nil {
			return nil, fmt.Errorf("queue: %w", err)
		}
		out = append(out, l)
	}
	return out, nil
}

// workerQueues returns the Asynq queues of a worker with n shards over
// queues (nil: the default queue): queues as given with one shard, else
// the shards' queues, each with weight 1; and the layouts to claim.
func workerQueues(n int, queues map[string]int, prefix string) (map[string]int, []shard.Layout, error) {
	if len(queues) == 0 {
		queues = map[string]int{defaultQueue: 1}
	}
	layouts, err := shardLayouts(n, slices.Sorted(maps.Keys(queues)), prefix)
	if err != nil {
		return nil, nil, err
	}
	if n <= 1 {
		return queues, layouts, nil
	}
	out := map[string]int{}
	for _, q := range layouts[0].Queues() {
		out[q] = 1
	}
	return out, layouts, nil
}

// claimLayouts records or checks each layout (shard.Layout.Claim) until
// Redis answers or ctx ends: a Redis that is away at start is waited for,
// as a worker waits for it later; a mismatch is returned at once.
func claimLayouts(ctx context.Context, rdb redis.Cmdable, layouts []shard.Layout, knowsPrefix bool, waiting func(error)) error {
	backoff := 100 * time.Millisecond
	for _, l := range layouts {
		for {
			err := l.Claim(ctx, rdb, knowsPrefix)
			var me *shard.MismatchError
			if err == nil || errors.As(err, &me) {
				if err != nil {
					return err
				}
				break
			}
			if waiting != nil {
				waiting(err)
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("queue: %w (%w)", ctx.Err(), err)
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 2*time.Second)
		}
	}
	return nil
}

// clientShards is the Client's side of the shards: the layout it enqueues
// by, and whether the deployment's recorded layout was found to be it.
type clientShards struct {
	layout shard.Layout
	// rdb reads the recorded layout (nil: the Client has no go-redis
	// client, and checks nothing); record: the Client knows the key prefix
	// (it has Replies), so it records the layout when none is.
	rdb     redis.UniversalClient
	record  bool
	claimed atomic.Bool
}

// claim checks the deployment's layout once per Client (until it
// succeeds): a Client with another layout enqueues nothing. A Client
// without Replies knows no key prefix: it records no layout, and compares
// the rest of it with the recorded one.
func (s *clientShards) claim(ctx context.Context) error {
	if s.claimed.Load() || s.rdb == nil {
		return nil
	}
	switch err := s.layout.Claim(ctx, s.rdb, s.record); {
	case errors.Is(err, shard.ErrNotRecorded):
		return nil // (asked again at the next Enqueue, until a worker recorded it)
	case err != nil:
		return err
	}
	s.claimed.Store(true)
	return nil
}

// queueOf returns the queue of the task id: the shard its id names, else
// (one shard, or an id of no shard) the configured queue.
func (s *clientShards) queueOf(id string) string {
	if i, ok := s.layout.OfTask(id); ok {
		return s.layout.Queue(i)
	}
	return s.layout.BaseQueue()
}
