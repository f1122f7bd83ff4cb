package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisPersistence is what a Redis server says of its persistence (CONFIG
// GET appendonly, appendfsync and save).
type redisPersistence struct {
	Node        string // the server's address (a cluster has several)
	AOF         bool   // appendonly yes
	AppendFsync string // always, everysec, no (with AOF)
	Save        string // the RDB snapshot schedule ("" none)
	// Err: the settings could not be read (CONFIG refused: ACL, a managed
	// Redis that renames it, or a server without it such as miniredis).
	Err error
}

// persistent reports whether a restart of the server keeps what was written
// (all of it with AOF, up to the last snapshot with RDB only).
func (p redisPersistence) persistent() bool { return p.AOF || p.Save != "" }

// checkPersistence reads the persistence settings of rdb's servers (each
// master of a cluster).
func checkPersistence(ctx context.Context, rdb redis.UniversalClient) []redisPersistence {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		var mu sync.Mutex
		var out []redisPersistence
		err := c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error {
			p := persistenceOf(ctx, n, n.Options().Addr)
			mu.Lock()
			out = append(out, p)
			mu.Unlock()
			return nil
		})
		if err != nil && len(out) == 0 {
			out = append(out, redisPersistence{Node: "cluster", Err: err})
		}
		return out
	}
	addr := ""
	if c, ok := rdb.(*redis.Client); ok {
		addr = c.Options().Addr
	}
	return []redisPersistence{persistenceOf(ctx, rdb, addr)}
}

// persistenceOf reads one server's persistence settings.
func persistenceOf(ctx context.Context, c redis.Cmdable, addr string) redisPersistence {
	p := redisPersistence{Node: addr}
	m, err := c.ConfigGet(ctx, "appendonly").Result()
	if err == nil {
		var fsync, save map[string]string
		if fsync, err = c.ConfigGet(ctx, "appendfsync").Result(); err == nil {
			save, err = c.ConfigGet(ctx, "save").Result()
		}
		if err == nil {
			v, ok := m["appendonly"]
			if !ok {
				err = fmt.Errorf("CONFIG GET appendonly answered %v", m)
			}
			p.AOF, p.AppendFsync, p.Save = v == "yes", fsync["appendfsync"], strings.TrimSpace(save["save"])
		}
	}
	p.Err = err
	return p
}

// persistenceCheckTimeout bounds the check at start.
const persistenceCheckTimeout = 3 * time.Second

// logPersistence checks rdb's persistence at start and says what it found:
// a warning outside dev mode when a server persists nothing (a restart then
// loses every queued message and every chat's line: see
// docs/redis-persistence.md), or when the settings could not be read.
func logPersistence(ctx context.Context, rdb redis.UniversalClient, logger *slog.Logger, dev bool) {
	ctx, cancel := context.WithTimeout(ctx, persistenceCheckTimeout)
	defer cancel()
	for _, p := range checkPersistence(ctx, rdb) {
		describePersistence(logger, p, dev)
	}
}

// describePersistence logs what p says (see logPersistence).
func describePersistence(logger *slog.Logger, p redisPersistence, dev bool) {
	const doc = "docs/redis-persistence.md"
	warn := logger.Warn
	if dev {
		warn = logger.Debug // dev mode's in-memory Redis persists nothing, as expected
	}
	switch {
	case p.Err != nil:
		warn("Redis persistence could not be checked (CONFIG GET refused): make sure it runs with appendonly yes, or a restart loses queued messages and every chat's line",
			"redis", p.Node, "error", p.Err.Error(), "see", doc)
	case !p.persistent():
		warn("Redis has no persistence (appendonly no, no save schedule): a restart loses every queued message and every chat's line; run it with appendonly yes",
			"redis", p.Node, "see", doc)
	case !p.AOF:
		logger.Info("Redis persists by snapshots only: a restart loses what was written since the last one; appendonly yes keeps every write",
			"redis", p.Node, "save", p.Save, "see", doc)
	default:
		logger.Info("Redis persistence", "redis", p.Node, "appendonly", "yes", "appendfsync", p.AppendFsync, "save", p.Save)
	}
}
