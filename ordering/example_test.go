package ordering_test

import (
	"context"
	"errors"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/ordering"
)

// A client enqueues, then joins the line; the server's handler acquires the
// turn, runs it, releases it and wakes the next one.
func Example() {
	const queue = "lettaq"
	opt := asynq.RedisClientOpt{Addr: "127.0.0.1:6379"}
	rdb := redis.NewClient(&redis.Options{Addr: opt.Addr})
	seq, _ := ordering.New(rdb, ordering.Config{})
	insp := asynq.NewInspector(opt)
	key := ordering.KeyFor(ordering.ScopeConversation, "agent-1", "telegram", "42")

	// Client, per message.
	client := asynq.NewClient(opt)
	id := "msg-1001"
	_, err := client.Enqueue(asynq.NewTask("turn", []byte(key)), asynq.TaskID(id), asynq.Queue(queue), asynq.MaxRetry(25))
	if err == nil || errors.Is(err, asynq.ErrTaskIDConflict) {
		_, _ = seq.Join(context.Background(), key, id)
	}

	// Server.
	handler := func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		key := string(t.Payload())
		lease, err := seq.Acquire(ctx, key, id, "worker-1", ordering.InspectorAlive(insp, queue))
		switch {
		case ordering.IsMerged(err), errors.Is(err, ordering.ErrDone):
			return nil // answered by an earlier turn / a duplicate delivery
		case err != nil:
			return err // NotYourTurn: put back, no retry used
		}
		tctx, cancel := lease.Context(ctx) // ends the turn if the lease is lost
		defer cancel()
		done := runTurn(tctx) // false: still running at the agent, retry later
		next, _ := lease.Release(context.WithoutCancel(ctx), done)
		if done {
			_ = seq.Wake(ctx, insp, queue, key, next)
		}
		return nil
	}
	srv := asynq.NewServer(opt, asynq.Config{
		Queues:                   map[string]int{queue: 1},
		IsFailure:                ordering.IsFailure,
		RetryDelayFunc:           ordering.RetryDelay,
		DelayedTaskCheckInterval: time.Second,
	})
	_ = srv.Start(asynq.HandlerFunc(handler))
}

func runTurn(context.Context) bool { return true }
