// Package testkit is the Redis setup the tests of queue's parts share: a
// key prefix of the test's own whose keys are deleted when it ends, and a
// run of a test against both the real Redis and miniredis. Only tests
// import it.
package testkit

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
)

// Backend is a Redis for one (sub)test.
type Backend struct {
	// Name is "redis" (a real server) or "miniredis".
	Name string
	Srv  *testredis.Server
	RDB  *redis.Client
	// Prefix is unique to the (sub)test; its keys are deleted at the end.
	Prefix string
}

// noRealRedis is set once a test found no real Redis, so that later tests
// do not each wait for the connection attempt to time out.
var noRealRedis atomic.Bool

// EachRedis runs fn, as a subtest named for the backend, against the Redis
// testredis.New gives and, when that is a real server, also against
// miniredis, so both paths stay tested.
func EachRedis(t *testing.T, fn func(t *testing.T, b Backend)) {
	t.Helper()
	var srv *testredis.Server
	if noRealRedis.Load() {
		m := miniredis.RunT(t)
		srv = &testredis.Server{Addr: m.Addr(), Mini: m}
	} else {
		srv = testredis.New(t)
		noRealRedis.Store(!srv.Real)
	}
	servers := []*testredis.Server{srv}
	if srv.Real {
		m := miniredis.RunT(t)
		servers = append(servers, &testredis.Server{Addr: m.Addr(), Mini: m})
	}
	for _, s := range servers {
		name := "miniredis"
		if s.Real {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			rdb := s.Client(t)
			fn(t, Backend{Name: name, Srv: s, RDB: rdb, Prefix: Prefix(t, rdb)})
		})
	}
}

// Prefix is a key prefix of the test's own ("lettaqtest:<uuid>:"); its keys
// are deleted from rdb when the test ends. Cleanups run last first: call it
// after making rdb with testredis.Server.Client, so the keys go before rdb
// is closed.
func Prefix(t testing.TB, rdb redis.UniversalClient) string {
	prefix := "lettaqtest:" + uuid.NewString() + ":"
	t.Cleanup(func() {
		if err := DeletePrefix(context.Background(), rdb, prefix); err != nil {
			t.Logf("testkit: deleting %s*: %v", prefix, err)
		}
	})
	return prefix
}

// DeletePrefix deletes the keys that begin with prefix.
func DeletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	if err := iter.Err(); err != nil {
		return err
	}
	for len(keys) > 0 {
		n := min(len(keys), 500)
		if err := rdb.Del(ctx, keys[:n]...).Err(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}
