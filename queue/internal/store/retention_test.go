package store

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// oldEntries appends n entries to stream with ids age before now.
func oldEntries(t *testing.T, rdb redis.UniversalClient, stream string, n int, age time.Duration) {
	t.Helper()
	ms := time.Now().Add(-age).UnixMilli()
	for i := range n {
		if err := rdb.XAdd(context.Background(), &redis.XAddArgs{Stream: stream, ID: fmt.Sprintf("%d-%d", ms, i+1),
			Values: []any{"type", "old"}}).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// A write to a reply stream with a stream TTL trims its entries older than
// the TTL (whole nodes: at most one node's of them stay) and sets its
// expiry; without one it leaves both alone. The notify script the same.
func TestReplyStreamTrimmedByAge(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		ctx := context.Background()
		k := Keys{Prefix: b.Prefix}
		for _, tc := range []struct {
			name      string
			streamTTL time.Duration
			write     func(r *Replies, stream, n string) error
		}{
			{"emit", time.Hour, func(r *Replies, stream, n string) error {
				_, _, _, err := r.Emit(ctx, stream, "task-"+n, "", "type", "phase", "task_id", "task-"+n, "otid", "", "run_id", "", "message_id", "", "time", "t", "data", "{}")
				return err
			}},
			{"notify", time.Hour, func(r *Replies, stream, n string) error {
				_, err := r.Notify(ctx, stream, k.Notified("web", "c-"+n, "key"), "sum", "tok", "type", "notify", "data", "{}")
				return err
			}},
			{"emit without a stream TTL", 0, func(r *Replies, stream, n string) error {
				_, _, _, err := r.Emit(ctx, stream, "task-"+n, "", "type", "phase", "task_id", "task-"+n, "otid", "", "run_id", "", "message_id", "", "time", "t", "data", "{}")
				return err
			}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				r := NewReplies(b.RDB, k, 10000, time.Hour, tc.streamTTL)
				stream := k.Replies("web", tc.name)
				oldEntries(t, b.RDB, stream, 250, 2*time.Hour)
				recent := time.Now().Add(-30 * time.Minute).UnixMilli()
				if err := b.RDB.XAdd(ctx, &redis.XAddArgs{Stream: stream, ID: strconv.FormatInt(recent, 10) + "-1", Values: []any{"type", "recent"}}).Err(); err != nil {
					t.Fatal(err)
				}
				if err := tc.write(r, stream, "1"); err != nil {
					t.Fatal(err)
				}
				n := b.RDB.XLen(ctx, stream).Val()
				ttl := b.RDB.PTTL(ctx, stream).Val()
				recentLeft := len(b.RDB.XRange(ctx, stream, strconv.FormatInt(recent, 10)+"-1", "+").Val())
				if tc.streamTTL == 0 {
					if n != 252 || ttl != -1 {
						t.Fatalf("%d entries, TTL %v; want all 252 and none", n, ttl)
					}
					return
				}
				if n > 2+100 || recentLeft != 2 {
					t.Fatalf("%d entries (%d from the last half hour), want at most one node of old ones beside the 2 recent", n, recentLeft)
				}
				if ttl <= 59*time.Minute || ttl > time.Hour {
					t.Fatalf("stream TTL %v, want the hour", ttl)
				}
			})
		}
	})
}

// An index entry a save adds trims its index of the entries whose turn
// time is more than the retention before the added one's.
func TestJournalIndexTrimmedByAge(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		ctx := context.Background()
		k := Keys{Prefix: b.Prefix}
		j := NewJournal(b.RDB, k, time.Hour, 100, []string{"recent"})
		now := time.Now()
		idx := k.Journal().Index("recent")
		b.RDB.ZAdd(ctx, idx, redis.Z{Score: float64(now.Add(-2 * time.Hour).UnixMilli()), Member: "old"},
			redis.Z{Score: float64(now.Add(-30 * time.Minute).UnixMilli()), Member: "recent"})
		args := append(j.SaveArgs("new", "o-new", "o-new", []byte(`{}`), now.UnixMilli(), true, false, 1), "1", IntentsFlag(false))
		for i, err := range Run(ctx, b.RDB, []Op{j.SaveOp(args, "new", false, 1, nil, 0)}) {
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		got := b.RDB.ZRange(ctx, idx, 0, -1).Val()
		if fmt.Sprint(got) != "[recent new]" {
			t.Fatalf("index %v, want [recent new]", got)
		}
		if ttl := b.RDB.PTTL(ctx, idx).Val(); ttl <= 59*time.Minute {
			t.Fatalf("index TTL %v, want the hour", ttl)
		}
	})
}
