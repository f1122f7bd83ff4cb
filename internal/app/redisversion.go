package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// minTrimByAge is the first Redis with XTRIM MINID, by which the reply
// streams are trimmed by age (LETTAQ_REPLY_STREAM_TTL). The reply script
// calls it with pcall: an older Redis writes the events all the same, and
// never trims them by age.
var minTrimByAge = redisVersion{Major: 6, Minor: 2}

// redisVersion is a server's redis_version (INFO server).
type redisVersion struct {
	Major, Minor, Patch int
}

func (v redisVersion) String() string { return fmt.Sprintf("%d.%d.%d", v.Major, v.Minor, v.Patch) }

// less reports whether v is older than w.
func (v redisVersion) less(w redisVersion) bool {
	if v.Major != w.Major {
		return v.Major < w.Major
	}
	if v.Minor != w.Minor {
		return v.Minor < w.Minor
	}
	return v.Patch < w.Patch
}

// parseRedisVersion reads redis_version from an INFO reply.
func parseRedisVersion(info string) (redisVersion, error) {
	for _, line := range strings.Split(info, "\n") {
		val, ok := strings.CutPrefix(strings.TrimSpace(line), "redis_version:")
		if !ok {
			continue
		}
		parts := strings.SplitN(val, ".", 3)
		var n [3]int
		for i, p := range parts {
			// A build may add a suffix to the last part (7.4.0-rc1).
			if j := strings.IndexFunc(p, func(r rune) bool { return r < '0' || r > '9' }); j >= 0 {
				p = p[:j]
			}
			x, err := strconv.Atoi(p)
			if err != nil {
				return redisVersion{}, fmt.Errorf("redis_version %q is not a version", val)
			}
			n[i] = x
		}
		return redisVersion{n[0], n[1], n[2]}, nil
	}
	return redisVersion{}, fmt.Errorf("INFO server has no redis_version")
}

// serverVersion is what one server said of its version.
type serverVersion struct {
	Node    string
	Version redisVersion
	Err     error // INFO server refused, or no version in it
}

// checkRedisVersion reads the version of rdb's servers (each master of a
// cluster).
func checkRedisVersion(ctx context.Context, rdb redis.UniversalClient) []serverVersion {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []serverVersion
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			v := versionOf(ctx, n, n.Options().Addr)
			mu.Lock()
			out = append(out, v)
			mu.Unlock()
			return nil
		})
		if err != nil && len(out) == 0 {
			out = append(out, serverVersion{Node: "cluster", Err: err})
		}
		return out
	}
	addr := ""
	if c, ok := rdb.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	return []serverVersion{versionOf(ctx, rdb, addr)}
}

func versionOf(ctx context.Context, c redis.Cmdable, addr string) serverVersion {
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		return serverVersion{Node: addr, Err: err}
	}
	v, err := parseRedisVersion(info)
	return serverVersion{Node: addr, Version: v, Err: err}
}

// logRedisVersion checks rdb's version at start, beside its persistence:
// one warning for a server older than 6.2 (its reply streams are bounded only
// by count and by their idle expiry, not by age).
func logRedisVersion(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger, dev bool) {
	ctx, cancel := context.WithTimeout(ctx, persistenceCheckTimeout)
	defer cancel()
	for _, v := range checkRedisVersion(ctx, rdb) {
		describeRedisVersion(logger, v, dev)
	}
}

// describeRedisVersion logs what v says (see logRedisVersion).
func describeRedisVersion(logger *slog.Logger, v serverVersion, dev bool) {
	switch {
	case v.Err != nil:
		// Not a warning: a Redis that refuses INFO (an ACL, dev mode's
		// in-memory one) is most likely a recent one.
		lvl := slog.LevelInfo
		if dev {
			lvl = slog.LevelDebug
		}
		logger.Log(context.Background(), lvl, "Redis version could not be read (INFO server); the reply streams are trimmed by age only on Redis 6.2 or newer",
			"redis", v.Node, "error", v.Err.Error())
	case v.Version.less(minTrimByAge):
		logger.Warn(fmt.Sprintf("Redis %s is older than %d.%d: it has no XTRIM MINID, so the reply streams are not trimmed by age (LETTAQ_REPLY_STREAM_TTL); they are bounded only by their count (~10,000 events each) and expire when idle. Use Redis 6.2 or newer",
			v.Version, minTrimByAge.Major, minTrimByAge.Minor),
			"redis", v.Node, "redis_version", v.Version.String())
	default:
		logger.Debug("Redis version", "redis", v.Node, "redis_version", v.Version.String())
	}
}
