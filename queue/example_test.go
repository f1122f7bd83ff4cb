package queue_test

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A message's task id comes from the integration's own message id, so a
// webhook delivered twice makes one task; its otid is derived from the
// task id, the same on every attempt.
func ExampleTaskIDFor() {
	m := queue.Message{AgentID: "agent-1", Text: "hello",
		Conversation: record.Conversation{Integration: "telegram", ChatID: "123"}, MessageID: "987"}
	id := queue.TaskIDFor(m)
	fmt.Println(id)
	fmt.Println(queue.OtidFor(m, id) == queue.OtidFor(m, id))
	// Output:
	// turn:telegram:123:987
	// true
}

// Validation errors name the payload field at fault.
func ExampleMessage_Validate() {
	m := queue.Message{AgentID: "agent-1", Conversation: record.Conversation{Integration: "slack", ChatID: "C1"}}
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
		Conversation: record.Conversation{Integration: "telegram", ChatID: "123"}, MessageID: "987"}
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

// Follow a chat's reply events to the answer: read the chat's stream from the
// start (or from the last id you saw) and stop at the turn's final event.
// Here the worker, the Redis and the Letta server all run in the process
// (see startWorker); with yours, only the reading loop is needed.
func ExampleReplies_Read() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	sim := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer sim.Close()
	agent := sim.CreateAgent("demo", nil)
	defer startWorker(mr.Addr(), sim.URL)()

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{})
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: mr.Addr()}, Replies: replies})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	chat := record.Conversation{Integration: "web", ChatID: "42"}
	// The simulator's directive makes the agent call a tool before it answers.
	res, err := c.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: chat, MessageID: "7",
		Text: "[[sim tool=web_search]] what is new?"})
	if err != nil {
		log.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	after := "0" // the whole retained stream; keep the last id to resume without a gap
	for {
		events, last, err := replies.Read(ctx, chat, after, 0, time.Second)
		if err != nil {
			fmt.Println("read:", err)
			return
		}
		after = last
		for _, ev := range events {
			if ev.TaskID != res.TaskID {
				continue // another turn of the same chat
			}
			switch ev.Type {
			case record.EventAccepted:
				fmt.Println("accepted:", ev.TaskID, "position", ev.Position)
			case record.EventPhase, record.EventAnswerDelta:
				// Typing indicators and partial text: how many come depends on timing.
			case record.EventTool:
				fmt.Println("tool:", ev.Tool.Name, ev.Tool.Status)
			case record.EventAnswer:
				fmt.Println("answer:", ev.Text)
			case record.EventError:
				fmt.Println("error:", ev.Text, "permanent:", ev.Permanent)
			}
			if ev.Type.Final() {
				return
			}
		}
	}
	// Output:
	// accepted: turn:web:42:7 position 0
	// tool: web_search call
	// tool: web_search success
	// answer: you said: what is new?
}

// Answer an approval: the agent asks to run a tool that needs a person's
// yes, the turn ends with an approval_required event naming the calls, and
// the answer (Approve, Deny, or AnswerApproval call by call) is a turn of its
// own whose run goes on. A second press of the button enqueues nothing.
func ExampleClient_Approve() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	sim := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	defer sim.Close()
	agent := sim.CreateAgent("assistant", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.ApprovalRequest, ToolName: "send_email", Arguments: `{"to": "bob@example.com"}`},
		// What the run does once the call is approved:
		{Kind: lettasim.Assistant, Text: "I emailed Bob."},
	}})
	defer startWorker(mr.Addr(), sim.URL)()

	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{})
	// The client keeps approval requests with the reply streams: give it Replies.
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: mr.Addr()}, Replies: replies})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	chat := record.Conversation{Integration: "web", ChatID: "42"}

	req, err := c.Enqueue(ctx, queue.Message{AgentID: agent, Conversation: chat, MessageID: "8", Text: "email bob"})
	if err != nil {
		log.Fatal(err)
	}
	ev := followToFinal(replies, chat, req.TaskID)
	fmt.Println(ev.Type, "for", ev.Approval.RequestTaskID)
	for _, call := range ev.Approval.Calls {
		fmt.Println("asks:", call.Name, call.Arguments) // show the user; CallID answers it alone
	}

	ans, err := c.Approve(ctx, req.TaskID, "") // the task id or the otid of the turn that asked
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("answer turn:", ans.TaskID)
	ev = followToFinal(replies, chat, ans.TaskID)
	fmt.Println(ev.Type+":", ev.Text)

	again, err := c.Deny(ctx, req.TaskID, "too late")
	fmt.Println("pressed again:", again.TaskID, "duplicate:", again.Duplicate, err)
	// Output:
	// approval_required for turn:web:42:8
	// asks: send_email {"to": "bob@example.com"}
	// answer turn: answer:turn:web:42:8
	// answer: I emailed Bob.
	// pressed again: answer:turn:web:42:8 duplicate: true <nil>
}

// followToFinal reads chat's reply stream from its start until the final
// event of taskID (answer, approval_required or error), as ExampleReplies_Read
// does, and returns it.
func followToFinal(replies *queue.Replies, chat record.Conversation, taskID string) record.ReplyEvent {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	after := "0"
	for {
		events, last, err := replies.Read(ctx, chat, after, 0, time.Second)
		if err != nil {
			log.Fatalf("waiting for the final event of %s: %v", taskID, err)
		}
		after = last
		for _, ev := range events {
			if ev.TaskID == taskID && ev.Type.Final() {
				return ev
			}
		}
	}
}

// startWorker runs a worker on the Redis at redisAddr against the Letta
// server at lettaURL, as ExampleWorker_Run does in a process of its own,
// until the returned stop is called.
func startWorker(redisAddr, lettaURL string) (stop func()) {
	w, err := queue.NewWorker(queue.WorkerConfig{
		Redis:           asynq.RedisClientOpt{Addr: redisAddr},
		Letta:           queue.LettaConnection{URL: lettaURL},
		Concurrency:     4,
		ShutdownTimeout: time.Second,
		Timing:          queue.WorkerTiming{TaskCheckInterval: 10 * time.Millisecond},
		Logger:          slog.New(slog.DiscardHandler),
	})
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			log.Fatal(err)
		}
	}
}

// Run a worker until SIGTERM; turns in flight get ShutdownTimeout to finish
// and are put back otherwise.
func ExampleWorker_Run() {
	w, err := queue.NewWorker(queue.WorkerConfig{
		Redis:  asynq.RedisClientOpt{Addr: "127.0.0.1:6379"},
		Letta:  queue.LettaConnection{URL: "http://localhost:8283"},
		Budget: budget.Default(),
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

// A scheduled job writes into a chat of its own accord: one notify event in
// the chat's reply stream, which the relay shows as a message. Sent again
// with the same key (the job retried), it writes nothing new. (An in-memory
// Redis stands in for yours.)
func ExampleClient_Notify() {
	mr := miniredis.NewMiniRedis()
	if err := mr.Start(); err != nil {
		log.Fatal(err)
	}
	defer mr.Close()
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{})
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: mr.Addr()}, Replies: replies})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	chat := record.Conversation{Integration: "telegram", ChatID: "123"}
	n := queue.Notice{Chat: chat, Text: "Your daily digest: 3 new items.", Key: "digest-2026-12-02"}
	for range 2 {
		res, err := c.Notify(context.Background(), n)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(res.TaskID, "duplicate:", res.Duplicate)
	}
	evs, _, err := replies.Read(context.Background(), chat, "0", 10, 0)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range evs {
		fmt.Println(ev.Type, ev.Seq, ev.Text)
	}
	// Output:
	// notify:digest-2026-12-02 duplicate: false
	// notify:digest-2026-12-02 duplicate: true
	// notify 1 Your daily digest: 3 new items.
}
