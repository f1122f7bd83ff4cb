package shard

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// The first start records the layout (not a producer that knows no prefix); the same layout starts again; another N or
// prefix is refused, naming both layouts; a producer that knows no prefix is
// compared on the rest.
func TestClaimRefusesAnotherLayout(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		ctx := context.Background()
		queue := "lettaq-layout-test-" + uuid.NewString()[:8]
		t.Cleanup(func() { b.RDB.Del(context.Background(), RecordKey(queue)) })
		first, _ := New(4, queue, "{app}:")
		if err := first.Claim(ctx, b.RDB, false); !errors.Is(err, ErrNotRecorded) {
			t.Fatalf("a producer that knows no prefix, first: %v, want ErrNotRecorded", err)
		}
		if n, _ := b.RDB.Exists(ctx, RecordKey(queue)).Result(); n != 0 {
			t.Fatal("a producer that knows no prefix recorded a layout")
		}
		if err := first.Claim(ctx, b.RDB, true); err != nil {
			t.Fatalf("first start: %v", err)
		}
		if got, _ := b.RDB.Get(ctx, RecordKey(queue)).Result(); got != "scheme=1 shards=4 queue="+queue+" prefix={app}:" {
			t.Errorf("recorded %q", got)
		}
		if err := first.Claim(ctx, b.RDB, true); err != nil {
			t.Fatalf("the same layout again: %v", err)
		}
		noPrefix, _ := New(4, queue, "other:")
		if err := noPrefix.Claim(ctx, b.RDB, false); err != nil {
			t.Errorf("a producer without the prefix, same N: %v", err)
		}
		for _, l := range []struct {
			n      int
			prefix string
		}{{1, "{app}:"}, {16, "{app}:"}, {4, "{other}:"}} {
			other, _ := New(l.n, queue, l.prefix)
			err := other.Claim(ctx, b.RDB, true)
			var me *MismatchError
			if !errors.As(err, &me) {
				t.Fatalf("n=%d prefix=%q: %v, want a *MismatchError", l.n, l.prefix, err)
			}
			if !strings.Contains(err.Error(), first.Record()) || !strings.Contains(err.Error(), other.Record()) ||
				!strings.Contains(err.Error(), "docs/operations.md") {
				t.Errorf("the refusal does not name both layouts and the way out: %v", err)
			}
		}
		one, _ := New(1, queue, "{app}:")
		if err := one.Claim(ctx, b.RDB, false); err == nil {
			t.Error("a producer with another N, without the prefix, was accepted")
		}
	})
}
