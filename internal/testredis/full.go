package testredis

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Fill makes rdb's Redis (a redis-server of the test's own: it changes its
// configuration) full as a production one gets: 8 MB of filler keys (under
// prefix), then maxmemory 1 MB below what it uses, policy noeviction, so
// that every write is refused with OOM while reads, DEL and PING go
// through. free deletes the filler: writes go through again.
func Fill(ctx context.Context, rdb *redis.Client, prefix string) (free func() error, err error) {
	value := strings.Repeat("x", 256<<10)
	keys := make([]string, 32)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sfiller:%d", prefix, i)
		if err := rdb.Set(ctx, keys[i], value, 0).Err(); err != nil {
			return nil, err
		}
	}
	free = func() error { return rdb.Del(context.WithoutCancel(ctx), keys...).Err() }
	info, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return nil, err
	}
	used, err := strconv.ParseInt(parseInfo(info)["used_memory"], 10, 64)
	if err != nil {
		return nil, fmt.Errorf("testredis: used_memory in INFO memory: %w", err)
	}
	if err := rdb.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		return nil, err
	}
	if err := rdb.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used-1<<20, 10)).Err(); err != nil {
		return nil, err
	}
	if err := rdb.Set(ctx, prefix+"filler:probe", "x", 0).Err(); !redis.HasErrorPrefix(err, "OOM") {
		return nil, fmt.Errorf("testredis: a write to the full Redis answered %v, want OOM", err)
	}
	return free, nil
}
