// Package testredis gives tests a Redis to talk to: the real server named by
// REDIS_URL (default redis://127.0.0.1:6379/0) when it answers, an in-process
// miniredis otherwise. With LETTAQ_REQUIRE_REDIS=1 (set by .ci/run) an
// unreachable real Redis fails the test instead of falling back.
package testredis

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Server is a Redis that a test may use.
type Server struct {
	// Addr is host:port.
	Addr string
	// DB is the logical database the test should use.
	DB int
	// Real reports whether this is a real redis-server (not miniredis).
	Real bool
	// Mini is set when the server is miniredis (tests may fast-forward it).
	Mini *miniredis.Miniredis
}

// Options returns go-redis options for this server.
func (s *Server) Options() *redis.Options {
	return &redis.Options{Addr: s.Addr, DB: s.DB}
}

// Client returns a new go-redis client; it is closed when the test ends.
func (s *Server) Client(t testing.TB) *redis.Client {
	c := redis.NewClient(s.Options())
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// URL returns a redis:// URL for the server.
func (s *Server) URL() string {
	return "redis://" + s.Addr + "/" + itoa(s.DB)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for i > 0 {
		b = append([]byte{byte('0' + i%10)}, b...)
		i /= 10
	}
	return string(b)
}

// Required reports whether an unreachable real Redis must fail tests.
func Required() bool { return os.Getenv("LETTAQ_REQUIRE_REDIS") == "1" }

// Real returns the real Redis if reachable. Tests on a real server share it,
// so each test must use its own key prefix or queue names.
func Real(t testing.TB) (*Server, bool) {
	t.Helper()
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatalf("testredis: REDIS_URL %q: %v", url, err)
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		if Required() {
			t.Fatalf("testredis: LETTAQ_REQUIRE_REDIS=1 but Redis at %s does not answer: %v", opt.Addr, err)
		}
		return nil, false
	}
	return &Server{Addr: opt.Addr, DB: opt.DB, Real: true}, true
}

// New returns the real Redis when reachable, miniredis otherwise.
func New(t testing.TB) *Server {
	t.Helper()
	if s, ok := Real(t); ok {
		return s
	}
	m := miniredis.RunT(t)
	return &Server{Addr: m.Addr(), Mini: m}
}

// RequireReal returns the real Redis or skips (fails when required).
func RequireReal(t testing.TB) *Server {
	t.Helper()
	s, ok := Real(t)
	if !ok {
		t.Skip("testredis: no real Redis reachable (set REDIS_URL)")
	}
	return s
}
