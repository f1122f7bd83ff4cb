package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// TestNewEventIsNotHeldBehindATypingRefresh: a running turn's chat waits for
// its typing refresh with no news; an event that comes meanwhile is shown at
// once, not when the refresh comes due (here an hour away).
func TestNewEventIsNotHeldBehindATypingRefresh(t *testing.T) {
	rdb := testredis.New(t).Client(t)
	prefix := fmt.Sprintf("runnertest%d:", rand.Int64())
	plat := fakeplatform.New(relay.Limits{StatusTTL: time.Hour})
	r := relay.New(relay.Config{Redis: rdb, Prefix: prefix, Logger: slog.New(slog.DiscardHandler),
		Adapters: map[string]relay.Adapter{"fake": plat}})
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(runCtx, relay.RunConfig{Shards: 4}) }()
	defer func() { stop(); <-done }()

	conv := record.Conversation{Integration: "fake", ChatID: "c1"}
	emit := func(ev record.ReplyEvent) {
		t.Helper()
		if _, err := replies.Emit(ctx, conv, ev); err != nil {
			t.Fatal(err)
		}
		if err := r.Mark(ctx, conv, 4); err != nil {
			t.Fatal(err)
		}
	}
	emit(record.ReplyEvent{Type: record.EventAccepted, TaskID: "t1"})
	if err := plat.Wait(ctx, func(p *fakeplatform.Platform) bool {
		for _, c := range p.Calls() {
			if c.Method == "status" && c.Kind == relay.StatusTyping {
				return true
			}
		}
		return false
	}); err != nil {
		t.Fatalf("no typing status: %v", err)
	}
	emit(record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "Hello"})
	if err := plat.Wait(ctx, func(p *fakeplatform.Platform) bool {
		m := p.Messages(conv)
		return len(m) == 1 && m[0].Text == "Hello"
	}); err != nil {
		t.Fatalf("the answer_delta was not shown while the chat waited for its typing refresh: %v; calls %+v", err, plat.Calls())
	}
}
