package app

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
)

// persistenceLines logs rdb's persistence (logPersistence) and returns the
// lines as level: message.
func persistenceLines(t *testing.T, rdb redis.UniversalClient, dev bool) []string {
	t.Helper()
	var buf bytes.Buffer
	logPersistence(context.Background(), rdb, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), dev)
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		out = append(out, m["level"].(string)+": "+m["msg"].(string))
	}
	return out
}

// The worker checks Redis's persistence at start: a Redis that
// persists nothing, or whose settings cannot be read (CONFIG refused), is a
// warning outside dev mode; snapshots only, or an append-only file, are
// said at info. On miniredis (no CONFIG) and on a redis-server of the
// test's own, set each way.
func TestPersistenceCheck(t *testing.T) {
	m := miniredis.RunT(t)
	mini := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer mini.Close()
	check := func(t *testing.T, rdb redis.UniversalClient, dev bool, want string) {
		t.Helper()
		got := persistenceLines(t, rdb, dev)
		if len(got) != 1 || !strings.HasPrefix(got[0], want) {
			t.Errorf("logged %q, want one line starting %q", got, want)
		}
	}
	t.Run("config refused", func(t *testing.T) {
		check(t, mini, false, "WARN: Redis persistence could not be checked")
		check(t, mini, true, "DEBUG: Redis persistence could not be checked")
	})
	if testing.Short() {
		return
	}
	rs := testredis.StartPersistent(t) // appendonly yes, appendfsync always, no snapshots
	rdb := rs.Client(t)
	ctx := context.Background()
	set := func(t *testing.T, kv ...string) {
		t.Helper()
		for i := 0; i < len(kv); i += 2 {
			if err := rdb.ConfigSet(ctx, kv[i], kv[i+1]).Err(); err != nil {
				t.Fatalf("CONFIG SET %s %q: %v", kv[i], kv[i+1], err)
			}
		}
	}
	t.Run("append-only", func(t *testing.T) {
		check(t, rdb, false, "INFO: Redis persistence")
		if p := checkPersistence(ctx, rdb)[0]; !p.AOF || p.AppendFsync != "always" || p.Save != "" || p.Err != nil {
			t.Errorf("read %+v", p)
		}
	})
	t.Run("snapshots only", func(t *testing.T) {
		set(t, "appendonly", "no", "save", "60 1")
		check(t, rdb, false, "INFO: Redis persists by snapshots only")
	})
	t.Run("none", func(t *testing.T) {
		set(t, "appendonly", "no", "save", "")
		check(t, rdb, false, "WARN: Redis has no persistence")
		check(t, rdb, true, "DEBUG: Redis has no persistence")
	})
	t.Run("acl without config", func(t *testing.T) {
		if err := rdb.Do(ctx, "ACL", "SETUSER", "noconfig", "on", ">pw", "~*", "+@all", "-config").Err(); err != nil {
			t.Skip("ACL:", err)
		}
		limited := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: "noconfig", Password: "pw"})
		defer limited.Close()
		check(t, limited, false, "WARN: Redis persistence could not be checked")
	})
}
