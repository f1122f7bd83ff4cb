package store

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// probeShards reads the key that keyIn names in each of keys' shards, in
// one pipeline, and returns the first value found (redis.Nil: none). It
// serves the reads by a name that does not carry its shard (an otid):
// rare reads by an operator or a continuation, where N small reads in one
// round trip cost less than an index of every otid outside its shard would.
func probeShards(ctx context.Context, rdb redis.UniversalClient, keys Keys, keyIn func(i int) string) (string, error) {
	n := keys.Shards()
	cmds := make([]*redis.StringCmd, n)
	p := rdb.Pipeline()
	for i := range n {
		cmds[i] = p.Get(ctx, keyIn(i))
	}
	_, _ = p.Exec(ctx) // each command's error is read below
	var first error
	for _, c := range cmds {
		v, err := c.Result()
		if err == nil {
			return v, nil
		}
		if err != redis.Nil && first == nil {
			first = err
		}
	}
	if first != nil {
		return "", first
	}
	return "", redis.Nil
}
