package store

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/record"
)

func newStore(t *testing.T) *Store {
	t.Helper()
	s, _ := newStoreOn(t)
	return s
}

// newStoreOn is newStore with its server, for a test whose keys must expire
// (miniredis's clock moves only when told: see passes).
func newStoreOn(t *testing.T) (*Store, *testredis.Server) {
	t.Helper()
	srv := testredis.New(t)
	return New(srv.Client(t), fmt.Sprintf("storetest%d:", rand.Int64()), 0), srv
}

// passes lets d go by on srv: real time on a real Redis, and miniredis's
// clock moved as far (its keys expire only then).
func passes(srv *testredis.Server, d time.Duration) {
	time.Sleep(d)
	if srv.Mini != nil {
		srv.Mini.FastForward(d)
	}
}

// A mark that comes while a chat is drained keeps it dirty: Clean removes
// only the version the drain started from.
func TestCleanKeepsAMarkMadeDuringTheDrain(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := record.Conversation{Integration: "fake", ChatID: "c1"}
	if err := s.Mark(ctx, c, 4); err != nil {
		t.Fatal(err)
	}
	ds, err := s.Dirty(ctx, Shard(c, 4), 10)
	if err != nil || len(ds) != 1 {
		t.Fatalf("dirty %v, %v", ds, err)
	}
	if err := s.Mark(ctx, c, 4); err != nil { // during the drain
		t.Fatal(err)
	}
	if err := s.Clean(ctx, ds[0], 4); err != nil {
		t.Fatal(err)
	}
	if ds2, _ := s.Dirty(ctx, Shard(c, 4), 10); len(ds2) != 1 {
		t.Fatalf("a mark made during the drain was cleaned away: %v", ds2)
	}
	ds, _ = s.Dirty(ctx, Shard(c, 4), 10)
	_ = s.Clean(ctx, ds[0], 4)
	if ds3, _ := s.Dirty(ctx, Shard(c, 4), 10); len(ds3) != 0 {
		t.Fatalf("still dirty after a clean drain: %v", ds3)
	}
}

// A replica whose shard was taken over writes nothing more for its chats.
func TestWritesAreFencedByTheShardLease(t *testing.T) {
	ctx := context.Background()
	s, srv := newStoreOn(t)
	c := record.Conversation{Integration: "fake", ChatID: "c1"}
	sh := Shard(c, 4)
	if ok, err := s.AcquireShard(ctx, sh, "old", 50*time.Millisecond); !ok || err != nil {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	old := Fence{Key: s.ShardKey(sh), Token: "old"}
	if err := s.SaveMsg(ctx, c, old, "t1", "0", "m1"); err != nil {
		t.Fatal(err)
	}
	passes(srv, 100*time.Millisecond) // the old lease's 50 ms
	if ok, err := s.AcquireShard(ctx, sh, "new", time.Second); !ok || err != nil {
		t.Fatalf("takeover: %v %v", ok, err)
	}
	if err := s.SaveMsg(ctx, c, old, "t1", "1", "m2"); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("SaveMsg under a lost lease: %v, want ErrLeaseLost", err)
	}
	if err := s.Advance(ctx, c, old, "1-0", nil, []string{"t1"}); !errors.Is(err, ErrLeaseLost) {
		t.Fatalf("Advance under a lost lease: %v, want ErrLeaseLost", err)
	}
	st, err := s.Load(ctx, c)
	if err != nil || st.Msgs["t1"]["0"] != "m1" || len(st.Msgs["t1"]) != 1 || st.Cursor != "" {
		t.Fatalf("state %+v, %v: want only the first id, no cursor", st, err)
	}
}

// Advance forgets a finished turn's ids and open mark with the cursor, in one
// script.
func TestAdvanceForgetsFinishedTurns(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	c := record.Conversation{Integration: "fake", ChatID: "a:b"}
	_ = s.SaveMsg(ctx, c, Fence{}, "t:1", "0", "m1")
	_ = s.SaveMsg(ctx, c, Fence{}, "t:2", "0", "m2")
	if err := s.Advance(ctx, c, Fence{}, "5-0", map[string]string{"t:1": "1-0", "t:2": "2-0"}, nil); err != nil {
		t.Fatal(err)
	}
	if err := s.Advance(ctx, c, Fence{}, "6-0", nil, []string{"t:1"}); err != nil {
		t.Fatal(err)
	}
	st, _ := s.Load(ctx, c)
	if st.Cursor != "6-0" || st.Open["t:1"] != "" || st.Open["t:2"] != "2-0" || st.Msgs["t:1"] != nil || st.Msgs["t:2"]["0"] != "m2" {
		t.Fatalf("state %+v", st)
	}
}
