package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/internal/testredis"
)

// The push that makes a task's list of intents gives it its retention in the same script, so
// that the list never exists without one; a later push (a refusal, another attempt's intent)
// leaves the expiry to the record's saves; a push sent again appends nothing.
func TestIntentPushExpiry(t *testing.T) {
	srv := testredis.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	k := Keys{Prefix: "lettaqtest:" + uuid.NewString() + ":"}
	j := NewJournal(rdb, k, time.Hour, 100, nil)
	key := k.Journal().Intents("t1")
	t.Cleanup(func() { _ = rdb.Del(context.Background(), key).Err() })
	if err := j.AppendIntent(ctx, "t1", []byte(`{"attempt":1}`)); err != nil {
		t.Fatal(err)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 59*time.Minute {
		t.Fatalf("the first push left the list's expiry at %v, want the hour", ttl)
	}
	if err := rdb.PExpire(ctx, key, time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second time as go-redis sends it again: nothing appended
		if err := j.AppendIntent(ctx, "t1", []byte(`{"attempt":1,"refused":true}`)); err != nil {
			t.Fatal(err)
		}
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 0 || ttl > time.Minute {
		t.Fatalf("a later push set the expiry to %v, want the minute left as it was", ttl)
	}
	if n := rdb.LLen(ctx, key).Val(); n != 2 {
		t.Fatalf("%d intents, want 2", n)
	}
}
