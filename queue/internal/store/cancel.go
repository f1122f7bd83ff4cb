package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cancel is the record that a turn's cancel was asked for (its value: the
// JSON of the queue's cancel record). It is written before the cancel is
// acknowledged, so that a worker that dies meanwhile leaves it to the
// attempt that recovers the turn, and lives as long as the journal's
// records.
func (k Keys) Cancel(taskID string) string { return k.TaskPrefix(taskID) + "cancel:" + taskID }

// CancelChannel is the Pub/Sub channel on which a cancel's task id is
// published once its record is written: the worker running the turn hears
// it (a worker that misses it reads the records of its running turns when
// it subscribes again).
func (k Keys) CancelChannel() string { return k.Prefix + "cancel" }

// PutCancel writes taskID's cancel record (b) for ttl, then publishes the
// task id; the record is written when PutCancel returns nil (the publish
// is best effort: its error is returned apart, as published false).
func (r *Replies) PutCancel(ctx context.Context, taskID string, b []byte, ttl time.Duration) (published bool, err error) {
	if err := r.RDB.Set(ctx, r.Keys.Cancel(taskID), b, ttl).Err(); err != nil {
		return false, err
	}
	return r.RDB.Publish(ctx, r.Keys.CancelChannel(), taskID).Err() == nil, nil
}

// GetCancel reads taskID's cancel record (found false: none).
func (r *Replies) GetCancel(ctx context.Context, taskID string) (b []byte, found bool, err error) {
	b, err = r.RDB.Get(ctx, r.Keys.Cancel(taskID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// GetCancels reads the cancel records of taskIDs, in one round trip (nil
// where none); on a Redis Cluster each key is read on its own.
func (r *Replies) GetCancels(ctx context.Context, taskIDs []string) ([][]byte, error) {
	out := make([][]byte, len(taskIDs))
	p := r.RDB.Pipeline()
	cmds := make([]*redis.StringCmd, len(taskIDs))
	for i, id := range taskIDs {
		cmds[i] = p.Get(ctx, r.Keys.Cancel(id))
	}
	_, _ = p.Exec(ctx)
	for i, c := range cmds {
		b, err := c.Bytes()
		switch {
		case errors.Is(err, redis.Nil):
		case err != nil:
			return nil, err
		default:
			out[i] = b
		}
	}
	return out, nil
}

// SubscribeCancels subscribes to the cancel channel. Read it with
// ChannelWithSubscriptions: a *redis.Subscription arrives on every
// (re)subscription, a *redis.Message per cancel.
func (r *Replies) SubscribeCancels(ctx context.Context) *redis.PubSub {
	return r.RDB.Subscribe(ctx, r.Keys.CancelChannel())
}

// CancelReadOp reads taskID's cancel record in a round trip of ops: found
// says whether there is one once the round trip ran.
func (r *Replies) CancelReadOp(taskID string, found *bool) Op {
	return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
		c := p.Exists(ctx, r.Keys.Cancel(taskID))
		return func() error {
			n, err := c.Result()
			*found = n == 1
			return err
		}
	}
}
