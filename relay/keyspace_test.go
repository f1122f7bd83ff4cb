package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/store"
)

// markGate holds the first round trip that marks chats until released, and
// counts those round trips.
type markGate struct {
	release chan struct{}
	once    sync.Once
	marks   atomic.Int64
}

func isMark(cmds []redis.Cmder) bool {
	for _, c := range cmds {
		if n := strings.ToLower(c.Name()); n == "zincrby" || n == "evalsha" || n == "eval" {
			return true
		}
	}
	return false
}

func (g *markGate) DialHook(next redis.DialHook) redis.DialHook { return next }
func (g *markGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if isMark([]redis.Cmder{cmd}) {
			g.marks.Add(1)
			g.once.Do(func() { <-g.release })
		}
		return next(ctx, cmd)
	}
}
func (g *markGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if isMark(cmds) {
			g.marks.Add(1)
			g.once.Do(func() { <-g.release })
		}
		return next(ctx, cmds)
	}
}

// TestKeyspaceNotificationsThatCameMeanwhileAreMarkedInOneRoundTrip: every chat whose stream gets
// an entry is marked, and the notifications that came while a mark was on its
// way are marked together, not one round trip each.
func TestKeyspaceNotificationsThatCameMeanwhileAreMarkedInOneRoundTrip(t *testing.T) {
	red := testredis.StartPersistent(t) // its own: Notify turns keyspace notifications on
	rdb := red.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix, shards, chats = "notifytest:", 4, 80
	gate := &markGate{release: make(chan struct{})}
	nrdb := red.Client(t)
	nrdb.AddHook(gate)
	r := relay.New(relay.Config{Redis: nrdb, Prefix: prefix, Logger: slog.New(slog.DiscardHandler),
		Adapters: map[string]relay.Adapter{"fake": fakeplatform.New(relay.Limits{})}})
	done := make(chan struct{})
	nctx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = r.Notify(nctx, shards) }()
	defer func() { stop(); <-done }()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	st := store.New(rdb, prefix, 0)
	marked := func() map[string]bool {
		got := map[string]bool{}
		for sh := range shards {
			ds, err := st.Dirty(ctx, sh, 1000)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got[d.Chat.ChatID] = true
			}
		}
		return got
	}
	// The first event's mark is held at the gate: write until it is there (the
	// subscription is live then).
	probe := record.Conversation{Integration: "fake", ChatID: "probe"}
	for gate.marks.Load() == 0 {
		if _, err := replies.Emit(ctx, probe, record.ReplyEvent{Type: record.EventAccepted, TaskID: "tp"}); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ctx.Done():
			t.Fatal("no mark: the notifications do not come")
		case <-time.After(20 * time.Millisecond):
		}
	}
	for i := range chats {
		c := record.Conversation{Integration: "fake", ChatID: fmt.Sprintf("c%d", i)}
		if _, err := replies.Emit(ctx, c, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t" + c.ChatID}); err != nil {
			t.Fatal(err)
		}
	}
	close(gate.release)
	for len(marked()) < chats+1 {
		select {
		case <-ctx.Done():
			t.Fatalf("marked %d of %d chats", len(marked()), chats+1)
		case <-time.After(20 * time.Millisecond):
		}
	}
	if n := gate.marks.Load(); n > 10 {
		t.Errorf("%d round trips marked %d chats whose notifications had come meanwhile: want them marked together", n, chats)
	}
}

// TestKeyspaceNotificationsFindWhatWasWrittenWhileRedisRestarted: go-redis makes the
// subscription again by itself after a Redis restart, and the restarted Redis
// has forgotten the CONFIG SET that turned the notifications on; an event
// written then is marked all the same (Notify turns them on again and sweeps).
func TestKeyspaceNotificationsFindWhatWasWrittenWhileRedisRestarted(t *testing.T) {
	red := testredis.StartPersistent(t) // its own: it is restarted
	rdb := red.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const prefix, shards = "notifyrestart:", 4
	r := relay.New(relay.Config{Redis: red.Client(t), Prefix: prefix, Logger: slog.New(slog.DiscardHandler),
		Adapters: map[string]relay.Adapter{"fake": fakeplatform.New(relay.Limits{})}})
	done := make(chan struct{})
	nctx, stop := context.WithCancel(ctx)
	go func() { defer close(done); _ = r.Notify(nctx, shards) }()
	defer func() { stop(); <-done }()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	st := store.New(rdb, prefix, 0)
	isMarked := func(c record.Conversation) bool {
		ds, _ := st.Dirty(ctx, store.Shard(c, shards), 1000)
		for _, d := range ds {
			if d.Chat == c {
				return true
			}
		}
		return false
	}
	waitMarked := func(c record.Conversation, emit bool) {
		t.Helper()
		for !isMarked(c) {
			if emit {
				if _, err := replies.Emit(ctx, c, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t" + c.ChatID}); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%s is not marked", c)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitMarked(record.Conversation{Integration: "fake", ChatID: "before"}, true) // the subscription is live
	if err := red.Restart(); err != nil {
		t.Fatal(err)
	}
	after := record.Conversation{Integration: "fake", ChatID: "after"}
	if _, err := replies.Emit(ctx, after, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t-after"}); err != nil {
		t.Fatal(err)
	}
	waitMarked(after, false)
	if v, _ := rdb.ConfigGet(ctx, "notify-keyspace-events").Result(); !strings.Contains(v["notify-keyspace-events"], "E") {
		t.Errorf("notifications not turned on again after the restart: %q", v)
	}
}
