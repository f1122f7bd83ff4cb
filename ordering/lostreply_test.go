package ordering_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// A TakeFollowers whose reply is lost after Redis ran it, sent again by
// go-redis (its default retries, as the worker's client has them), returns
// the followers the first run took and marked merged, instead of none: the
// head sends their texts, and they get its answer.
func TestLostReplyTakeFollowersReturnsThem(t *testing.T) {
	srv := testredis.New(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr, DB: srv.DB}) // MaxRetries: go-redis's default
	t.Cleanup(func() { _ = rdb.Close() })
	s, err := ordering.New(rdb, ordering.Config{Prefix: "lettaqtest:" + uuid.NewString() + ":", MergedTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	key := ordering.ConversationKey("agent-lost", "slack", "C1")
	joinAll(t, s, key, "h", "f1", "f2")
	l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "h", "w", nil))
	defer func() { _, _ = l.Release(ctx, true) }()
	f := p.DropReply(faultproxy.Any(faultproxy.Command("evalsha", "group:"), faultproxy.Command("eval", "group:")))
	got := must[[]string](t)(s.TakeFollowers(ctx, key, "h", 5))
	select {
	case <-f.Fired():
	case <-time.After(10 * time.Second):
		t.Fatal("the fault never fired")
	}
	merged := must[[]string](t)(s.MergedFollowers(ctx, key, "h"))
	if fmt.Sprint(got) != "[f1 f2]" || fmt.Sprint(merged) != "[f1 f2]" {
		t.Fatalf("TakeFollowers with its reply lost = %v (merged %v); want [f1 f2] and [f1 f2]", got, merged)
	}
	// A later call takes what joined since, as before.
	joinAll(t, s, key, "f3")
	if got := must[[]string](t)(s.TakeFollowers(ctx, key, "h", 5)); fmt.Sprint(got) != "[f3]" {
		t.Fatalf("TakeFollowers 2 = %v, want [f3]", got)
	}
}
