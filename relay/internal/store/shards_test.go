package store

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/record"
)

// argsHook records the arguments of every command sent alone.
type argsHook struct {
	mu   sync.Mutex
	sent [][]any
}

func (h *argsHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *argsHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.mu.Lock()
		h.sent = append(h.sent, cmd.Args())
		h.mu.Unlock()
		return next(ctx, cmd)
	}
}
func (h *argsHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// A wait shorter than a second is sent as such (a throttled edit or a typing
// refresh is due then), not rounded up to a second as go-redis's BLPop does.
func TestWaitBelowASecondIsNotRoundedUp(t *testing.T) {
	s, srv := newStoreOn(t)
	h := &argsHook{}
	rdb := srv.Client(t)
	rdb.AddHook(h)
	s.rdb = rdb
	ctx := context.Background()
	if err := s.Wait(ctx, []int{0, 1}, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	var blpop []any
	for _, a := range h.sent {
		if len(a) > 0 && a[0] == "blpop" {
			blpop = a
		}
	}
	if len(blpop) != 4 || blpop[3] != "0.050" {
		t.Fatalf("BLPOP sent as %v, want its timeout 0.050 (seconds)", blpop)
	}
	// A mark ends the wait.
	c := record.Conversation{Integration: "fake", ChatID: "c1"}
	if err := s.Mark(ctx, c, 2); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(ctx, []int{0, 1}, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
}

// MarkAll marks like Mark, for many chats at once, and DirtyAll reads what
// Dirty reads, for several shards at once.
func TestMarkAllAndDirtyAll(t *testing.T) {
	ctx := context.Background()
	s := newStore(t)
	const shards = 4
	var cs []record.Conversation
	for _, id := range []string{"a", "b", "c", "d", "e", "f"} {
		cs = append(cs, record.Conversation{Integration: "fake", ChatID: id})
	}
	if err := s.MarkAll(ctx, cs, shards); err != nil {
		t.Fatal(err)
	}
	if err := s.Mark(ctx, cs[0], shards); err != nil {
		t.Fatal(err)
	}
	all, err := s.DirtyAll(ctx, []int{0, 1, 2, 3}, 100)
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for sh := range shards {
		one, err := s.Dirty(ctx, sh, 100)
		if err != nil {
			t.Fatal(err)
		}
		if len(one) != len(all[sh]) {
			t.Fatalf("shard %d: DirtyAll %v, Dirty %v", sh, all[sh], one)
		}
		for i, d := range all[sh] {
			if d != one[i] || Shard(d.Chat, shards) != sh {
				t.Fatalf("shard %d: DirtyAll %v, Dirty %v", sh, all[sh], one)
			}
			want := 1.0
			if d.Chat == cs[0] {
				want = 2
			}
			if d.Version != want {
				t.Errorf("%s version %v, want %v", d.Chat, d.Version, want)
			}
			seen++
		}
		n, _ := s.rdb.LLen(ctx, s.wakeKey(sh)).Result()
		if n != int64(min(len(one), 1)) {
			t.Errorf("shard %d: wake list holds %d, want %d", sh, n, min(len(one), 1))
		}
	}
	if seen != len(cs) {
		t.Fatalf("%d chats marked, want %d", seen, len(cs))
	}
}
