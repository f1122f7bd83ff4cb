package main

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// redisBytes is what a set of keys holds in Redis (MEMORY USAGE, every element counted), by
// how long it stays: Asynq's keys (a finished task and its result are kept for the queue's
// retention, 24 h by default) and lettaq's own under the key prefix (journal records and
// reply streams: the journal retention; the chats' thread keys: always); Markers is the part
// of Lettaq that the replies' markers hold (seq, emitted, answered, accepted: 7 days, the
// replies' TTL, whatever the journal's retention).
type redisBytes struct {
	Asynq, Lettaq, Markers int64
}

// markerKinds are the replies' markers' key kinds, under the key prefix.
var markerKinds = []string{"seq:", "emitted:", "answered:", "accepted:"}

// Total is every byte of both.
func (b redisBytes) Total() int64 { return b.Asynq + b.Lettaq }

// per is the growth from b0 to b, divided by n turns.
func (b redisBytes) per(b0 redisBytes, n int) redisBytes {
	if n <= 0 {
		return redisBytes{}
	}
	return redisBytes{Asynq: (b.Asynq - b0.Asynq) / int64(n), Lettaq: (b.Lettaq - b0.Lettaq) / int64(n),
		Markers: (b.Markers - b0.Markers) / int64(n)}
}

// measureRedisBytes sums MEMORY USAGE … SAMPLES 0 over the keys of Asynq's queue qname and
// the keys under prefix (a Redis that has no MEMORY command, such as miniredis, answers an
// error).
func measureRedisBytes(ctx context.Context, rdb *redis.Client, qname, prefix string) (redisBytes, error) {
	var b redisBytes
	var err error
	if b.Asynq, err = keysBytes(ctx, rdb, "asynq:{"+qname+"}*"); err != nil {
		return b, err
	}
	if b.Lettaq, err = keysBytes(ctx, rdb, prefix+"*"); err != nil {
		return b, err
	}
	for _, kind := range markerKinds {
		n, err := keysBytes(ctx, rdb, prefix+kind+"*")
		if err != nil {
			return b, err
		}
		b.Markers += n
	}
	return b, nil
}

func keysBytes(ctx context.Context, rdb *redis.Client, pattern string) (int64, error) {
	var total int64
	iter := rdb.Scan(ctx, 0, pattern, 1000).Iterator()
	var batch []string
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		cmds := make([]*redis.IntCmd, len(batch))
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range batch {
				cmds[i] = p.MemoryUsage(ctx, k, 0)
			}
			return nil
		})
		for _, c := range cmds {
			if n, err := c.Result(); err == nil {
				total += n
			}
		}
		batch = batch[:0]
		if err != nil && err != redis.Nil {
			return fmt.Errorf("MEMORY USAGE: %w", err)
		}
		return nil
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == 500 {
			if err := flush(); err != nil {
				return 0, err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return 0, err
	}
	return total, flush()
}
