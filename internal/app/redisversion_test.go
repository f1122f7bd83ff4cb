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

// The version is read from INFO server's redis_version; only one older than
// 6.2 lacks XTRIM MINID.
func TestParseRedisVersion(t *testing.T) {
	for _, tc := range []struct {
		info      string
		want      string
		trimByAge bool
		bad       bool
	}{
		{info: "# Server\r\nredis_version:7.0.15\r\nredis_git_sha1:00000000\r\n", want: "7.0.15", trimByAge: true},
		{info: "# Server\r\nredis_version:6.2.0\r\n", want: "6.2.0", trimByAge: true},
		{info: "# Server\r\nredis_version:6.0.16\r\n", want: "6.0.16"},
		{info: "redis_version:5.0.7\n", want: "5.0.7"},
		{info: "redis_version:10.0.0\n", want: "10.0.0", trimByAge: true},
		{info: "redis_version:6.1.99\n", want: "6.1.99"},
		{info: "redis_version:7.4.0-rc1\n", want: "7.4.0", trimByAge: true},
		{info: "redis_version:6\n", want: "6.0.0"},
		{info: "# Server\r\nredis_mode:standalone\r\n", bad: true},
		{info: "redis_version:unknown\r\n", bad: true},
	} {
		v, err := parseRedisVersion(tc.info)
		if tc.bad {
			if err == nil {
				t.Errorf("%q: read %v, want an error", tc.info, v)
			}
			continue
		}
		if err != nil || v.String() != tc.want || !v.less(minTrimByAge) != tc.trimByAge {
			t.Errorf("%q: %v (trims by age: %v), %v; want %s (%v)", tc.info, v, !v.less(minTrimByAge), err, tc.want, tc.trimByAge)
		}
	}
}

// infoStub answers INFO with its text instead of asking the server.
type infoStub struct{ info string }

func (s infoStub) DialHook(next redis.DialHook) redis.DialHook { return next }
func (s infoStub) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c, ok := cmd.(*redis.StringCmd); ok && strings.EqualFold(cmd.Name(), "info") {
			c.SetVal(s.info)
			return nil
		}
		return next(ctx, cmd)
	}
}
func (s infoStub) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// versionLines logs rdb's version (logRedisVersion) and returns the lines as
// level: message.
func versionLines(t *testing.T, rdb redis.UniversalClient, dev bool) []string {
	t.Helper()
	var buf bytes.Buffer
	logRedisVersion(context.Background(), rdb, slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})), dev)
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

// The worker checks Redis's version at start: a Redis older than 6.2 gets
// one warning naming its version and what it means; a recent one none; one
// whose INFO cannot be read (miniredis has no server section) is said at
// info, at debug in dev mode.
func TestRedisVersionCheck(t *testing.T) {
	m := miniredis.RunT(t)
	client := func(info string) *redis.Client {
		rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
		t.Cleanup(func() { rdb.Close() })
		if info != "" {
			rdb.AddHook(infoStub{info})
		}
		return rdb
	}
	old := versionLines(t, client("# Server\r\nredis_version:6.0.16\r\nredis_mode:standalone\r\n"), false)
	if len(old) != 1 || !strings.HasPrefix(old[0], "WARN: Redis 6.0.16 is older than 6.2") ||
		!strings.Contains(old[0], "not trimmed by age") || !strings.Contains(old[0], "bounded only by their count") {
		t.Errorf("Redis 6.0.16: logged %q, want one warning naming the version and what it means", old)
	}
	if got := versionLines(t, client("# Server\r\nredis_version:7.2.4\r\n"), false); len(got) != 1 || got[0] != "DEBUG: Redis version" {
		t.Errorf("Redis 7.2.4: logged %q, want no warning", got)
	}
	for dev, want := range map[bool]string{false: "INFO: ", true: "DEBUG: "} {
		if got := versionLines(t, client(""), dev); len(got) != 1 || !strings.HasPrefix(got[0], want+"Redis version could not be read") {
			t.Errorf("miniredis (dev %v): logged %q, want one line at %s", dev, got, want)
		}
	}
	// A real server's INFO reads as its version.
	if rs, ok := testredis.Real(t); ok {
		v := checkRedisVersion(context.Background(), rs.Client(t))
		if len(v) != 1 || v[0].Err != nil || v[0].Version.Major < 2 {
			t.Errorf("read %+v from a real Redis", v)
		}
	}
}
