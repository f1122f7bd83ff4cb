package attempt

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// A new chat's thread, its key read empty with the attempt's start (read):
// without the creation lock (ordering on) the key is not read again before
// the conversation is made and kept; with the lock, or not read at the
// start, it is. Either way the conversation is kept, and a second chat's
// turn that finds it kept makes no other.
func TestThreadReadAtStartNotReadAgain(t *testing.T) {
	sim := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer sim.Close()
	agent := sim.CreateAgent("threads", nil)
	ac, err := agentclient.New(agentclient.Config{BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	var gets atomic.Int64
	rdb.AddHook(countGets{&gets})
	ctx := context.Background()
	for i, c := range []struct {
		lock, read bool
		wantGets   int64
	}{
		{lock: false, read: true, wantGets: 0},
		{lock: false, read: false, wantGets: 1},
		{lock: true, read: true, wantGets: 2}, // before and under the lock
	} {
		th := &Threads{Mode: ThreadConversation, RDB: rdb, Keys: store.Keys{Prefix: "p:"}, Client: ac, Lock: c.lock, LockTTL: 10 * time.Second}
		m := inbound.Message{AgentID: agent, Conversation: record.Conversation{Integration: "test", ChatID: string(rune('a' + i))}}
		gets.Store(0)
		id, err := th.resolveKnown(ctx, m, "", c.read, nil)
		if err != nil || !agentclient.ValidConversationID(id) {
			t.Fatalf("%+v: %q %v", c, id, err)
		}
		if n := gets.Load(); n != c.wantGets {
			t.Errorf("%+v: %d GETs of the thread key, want %d", c, n, c.wantGets)
		}
		if kept, err := rdb.Get(ctx, thread.Key("p:", agent, m.Conversation.Integration, m.Conversation.ChatID)).Result(); err != nil || kept != id {
			t.Errorf("%+v: kept %q (%v), want %q", c, kept, err, id)
		}
		again, err := th.resolveKnown(ctx, m, id, true, nil)
		if err != nil || again != id {
			t.Errorf("%+v: known: %q %v", c, again, err)
		}
	}
	if n := len(sim.Conversations(agent)); n != 3 {
		t.Errorf("%d conversations, want 3", n)
	}
}

// countGets counts the GETs a client sends alone.
type countGets struct{ n *atomic.Int64 }

func (h countGets) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countGets) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if cmd.Name() == "get" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (h countGets) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// Without the creation lock, the id made is kept by the op resolveKnown
// hands to keep (the attempt sends it with its next round trip), not by a
// write of its own; with the lock it is written under the lock.
func TestThreadKeptWithTheNextRoundTrip(t *testing.T) {
	sim := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer sim.Close()
	agent := sim.CreateAgent("threads", nil)
	ac, err := agentclient.New(agentclient.Config{BaseURL: sim.URL})
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})
	defer rdb.Close()
	ctx := context.Background()
	for i, lock := range []bool{false, true} {
		th := &Threads{Mode: ThreadConversation, RDB: rdb, Keys: store.Keys{Prefix: "p:"}, Client: ac, Lock: lock, LockTTL: 10 * time.Second}
		m := inbound.Message{AgentID: agent, Conversation: record.Conversation{Integration: "test", ChatID: string(rune('a' + i))}}
		key := thread.Key("p:", agent, m.Conversation.Integration, m.Conversation.ChatID)
		var ops []store.Op
		id, err := th.resolveKnown(ctx, m, "", true, func(op store.Op) { ops = append(ops, op) })
		if err != nil || !agentclient.ValidConversationID(id) {
			t.Fatalf("lock %v: %q %v", lock, id, err)
		}
		kept, _ := rdb.Get(ctx, key).Result()
		if lock {
			if kept != id || len(ops) != 0 {
				t.Errorf("with the lock: kept %q, %d ops; want %q kept, no op", kept, len(ops), id)
			}
			continue
		}
		if kept != "" || len(ops) != 1 {
			t.Fatalf("without the lock: kept %q before the op ran, %d ops; want none kept, one op", kept, len(ops))
		}
		for _, err := range store.Run(ctx, rdb, ops) {
			if err != nil {
				t.Fatal(err)
			}
		}
		if kept, err := rdb.Get(ctx, key).Result(); kept != id || err != nil {
			t.Errorf("after the op: kept %q (%v), want %q", kept, err, id)
		}
	}
}
