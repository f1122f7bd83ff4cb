package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/store"
)

// tripCounter counts round trips to Redis: SCANs apart from the rest.
type tripCounter struct{ scans, others atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch {
		case connInit(cmd):
		case strings.EqualFold(cmd.Name(), "scan"):
			c.scans.Add(1)
		default:
			c.others.Add(1)
		}
		return next(ctx, cmd)
	}
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if !connInit(cmds[0]) {
			c.others.Add(1)
		}
		return next(ctx, cmds)
	}
}

// connInit is a command go-redis sends when it opens a connection.
func connInit(cmd redis.Cmder) bool {
	n := strings.ToLower(cmd.Name())
	return n == "hello" || n == "client" || n == "auth" || n == "select"
}

// TestSweepMarksTheChatsWithNews: the start sweep marks exactly the chats whose
// stream has an entry past their cursor (or that have no cursor), in a few
// round trips per SCAN page rather than a few per stream.
func TestSweepMarksTheChatsWithNews(t *testing.T) {
	srv := testredis.New(t)
	rdb := srv.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("sweeptest%d:", rand.Int64())
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	st := store.New(rdb, prefix, 0)
	const chats, shards = 1200, 8
	want := map[string]bool{}
	for i := range chats {
		c := record.Conversation{Integration: "fake", ChatID: fmt.Sprintf("c%d", i)}
		first, err := replies.Emit(ctx, c, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t" + c.ChatID})
		if i%100 == 0 { // a chat of an integration without an adapter: never marked
			other := record.Conversation{Integration: "web", ChatID: c.ChatID}
			if _, err := replies.Emit(ctx, other, record.ReplyEvent{Type: record.EventAccepted, TaskID: "w" + c.ChatID}); err != nil {
				t.Fatal(err)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
		switch i % 3 {
		case 0: // shown up to its last entry: no news
			if err := st.Advance(ctx, c, store.Fence{}, first.ID, nil, nil); err != nil {
				t.Fatal(err)
			}
		case 1: // an entry past its cursor
			if err := st.Advance(ctx, c, store.Fence{}, first.ID, nil, nil); err != nil {
				t.Fatal(err)
			}
			if _, err := replies.Emit(ctx, c, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t" + c.ChatID, Text: "x"}); err != nil {
				t.Fatal(err)
			}
			want["fake:"+c.ChatID] = true
		case 2: // never shown
			want["fake:"+c.ChatID] = true
		}
	}
	counted := srv.Client(t)
	trips := &tripCounter{}
	counted.AddHook(trips)
	r := relay.New(relay.Config{Redis: counted, Prefix: prefix, Logger: slog.New(slog.DiscardHandler),
		Adapters: map[string]relay.Adapter{"fake": fakeplatform.New(relay.Limits{})}})
	n, err := r.Sweep(ctx, shards)
	if err != nil {
		t.Fatal(err)
	}
	if n != len(want) {
		t.Errorf("sweep marked %d chats, want %d", n, len(want))
	}
	got := map[string]bool{}
	for sh := range shards {
		ds, err := st.Dirty(ctx, sh, 10*chats)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			got[d.Chat.String()] = true
		}
	}
	for c := range want {
		if !got[c] {
			t.Errorf("%s has news and is not marked", c)
		}
	}
	for c := range got {
		if !want[c] {
			t.Errorf("%s is marked with no news", c)
		}
	}
	scans, others := trips.scans.Load(), trips.others.Load()
	t.Logf("%d streams swept in %d SCANs and %d other round trips", chats, scans, others)
	if others > 3*scans {
		t.Errorf("%d round trips besides %d SCANs: want at most 3 per SCAN page", others, scans)
	}
}
