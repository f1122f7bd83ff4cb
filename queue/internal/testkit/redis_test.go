package testkit

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// A test's prefix is its own, and its keys (more than one DEL's worth) are
// gone once the test ends; other keys stay.
func TestPrefixKeysDeletedAtTheEnd(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "other", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	var prefixes []string
	t.Run("user", func(t *testing.T) {
		for range 2 {
			prefix := Prefix(t, rdb)
			prefixes = append(prefixes, prefix)
			for i := range 700 {
				rdb.Set(ctx, prefix+strconv.Itoa(i), "v", 0)
			}
		}
	})
	if prefixes[0] == prefixes[1] || !strings.HasPrefix(prefixes[0], "lettaqtest:") {
		t.Fatalf("prefixes %q: want two of their own", prefixes)
	}
	if keys := m.Keys(); len(keys) != 1 || keys[0] != "other" {
		t.Fatalf("after the test Redis holds %d keys (%.3q…); want only other", len(keys), keys)
	}
}

// EachRedis runs fn on miniredis (and on the real Redis when it answers),
// each with a client and a prefix of its own.
func TestEachRedisGivesEachBackendItsOwnPrefix(t *testing.T) {
	seen := map[string]string{}
	EachRedis(t, func(t *testing.T, b Backend) {
		if b.RDB == nil || b.Srv == nil || b.Prefix == "" {
			t.Fatalf("backend %+v: want a client, a server and a prefix", b)
		}
		if err := b.RDB.Ping(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		seen[b.Name] = b.Prefix
	})
	if seen["miniredis"] == "" || seen["redis"] == seen["miniredis"] {
		t.Fatalf("backends run: %v", seen)
	}
}
