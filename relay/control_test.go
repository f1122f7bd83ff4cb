package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// TestStopThroughTheQueueClientShowsStopped sends /stop for a turn that waits
// in the queue (no worker runs): the relay cancels it through the real
// queue.Client, whose final event the relay then shows as stopped.
func TestStopThroughTheQueueClientShowsStopped(t *testing.T) {
	srv, ok := testredis.Real(t)
	if !ok {
		t.Skip("needs a real Redis (Asynq)")
	}
	ctx := context.Background()
	rdb := srv.Client(t)
	prefix := fmt.Sprintf("relaystop%d:", rand.Int64())
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	client, err := queue.NewClient(queue.ClientConfig{
		Redis:    asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB},
		Queue:    fmt.Sprintf("relaystop%d", rand.Int64()),
		Replies:  replies,
		Ordering: queue.Ordering{Off: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	conv := record.Conversation{Integration: "fake", ChatID: "c1"}
	res, err := client.Enqueue(ctx, queue.Message{AgentID: "agent-1", Text: "hi", Conversation: conv, MessageID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	plat := fakeplatform.New(relay.Limits{})
	r := relay.New(relay.Config{Redis: rdb, Prefix: prefix, Adapters: map[string]relay.Adapter{"fake": plat},
		Control: client, Logger: slog.New(slog.DiscardHandler)})
	if _, err := r.Drain(ctx, conv, relay.Lease{}); err != nil { // the accepted event: the turn is open
		t.Fatal(err)
	}
	cres, err := r.Command(ctx, conv, "/stop", "user-1")
	if err != nil {
		t.Fatal(err)
	}
	if !cres.Stopped() {
		t.Fatalf("/stop stopped nothing: %+v (task %s)", cres, res.TaskID)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if _, err := r.Drain(ctx, conv, relay.Lease{}); err != nil {
			t.Fatal(err)
		}
		msgs := plat.Messages(conv)
		if len(msgs) == 1 && msgs[0].Text == "⏹ Stopped." {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after /stop the chat shows %+v, want \"⏹ Stopped.\"", msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
