package queue_test

import (
	"context"
	"fmt"
	"log"
	"os/signal"
	"syscall"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
)

// A message's task id comes from the integration's own message id, so a
// webhook delivered twice makes one task; its otid is derived from the
// task id, the same on every attempt.
func ExampleTaskIDFor() {
	m := queue.Message{AgentID: "agent-1", Text: "hello",
		Conversation: queue.Conversation{Integration: "telegram", ChatID: "123"}, MessageID: "987"}
	id := queue.TaskIDFor(m)
	fmt.Println(id)
	fmt.Println(queue.OtidFor(m, id) == queue.OtidFor(m, id))
	// Output:
	// turn:telegram:123:987
	// true
}

// Validation errors name the payload field at fault.
func ExampleMessage_Validate() {
	m := queue.Message{AgentID: "agent-1", Conversation: queue.Conversation{Integration: "slack", ChatID: "C1"}}
	err := m.Validate()
	if ve, ok := queue.IsValidationError(err); ok {
		fmt.Println(ve.Field, "-", ve.Problem)
	}
	// Output: text - must not be empty
}

// Enqueue a message; a second delivery of the same message id is reported
// as a duplicate, not enqueued again. (An in-memory Redis stands in for
// yours: give ClientConfig.Redis your Redis's address.)
func ExampleClient_Enqueue() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()

	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: mr.Addr()}, Budget: budget.Default()})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	m := queue.Message{AgentID: "agent-1", Text: "hello",
		Conversation: queue.Conversation{Integration: "telegram", ChatID: "123"}, MessageID: "987"}
	for range 2 { // the webhook delivered twice
		res, err := c.Enqueue(context.Background(), m)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.TaskID, "duplicate:", res.Duplicate, "queue:", res.Queue, "position:", res.Position)
	}
	// Output:
	// turn:telegram:123:987 duplicate: false queue: lettaq position: 0
	// turn:telegram:123:987 duplicate: true queue: lettaq position: 0
}

// Run a worker until SIGTERM; turns in flight get ShutdownTimeout to finish
// and are put back otherwise.
func ExampleWorker_Run() {
	w, err := queue.NewWorker(queue.WorkerConfig{
		Redis:    asynq.RedisClientOpt{Addr: "127.0.0.1:6379"},
		LettaURL: "http://localhost:8283",
		Budget:   budget.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()
	if err := w.Run(ctx); err != nil {
		log.Fatal(err)
	}
}
