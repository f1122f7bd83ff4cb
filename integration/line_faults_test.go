package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// cancelAfterJoin cancels cancel once a script call touching a line key of
// the ordering prefix (the Join) has had its reply.
type cancelAfterJoin struct {
	line   string
	cancel context.CancelFunc
	fired  atomic.Bool
}

func (h *cancelAfterJoin) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *cancelAfterJoin) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *cancelAfterJoin) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			for _, a := range cmd.Args() {
				if s, ok := a.(string); ok && strings.HasPrefix(s, h.line) {
					h.fired.Store(true)
					h.cancel()
				}
			}
		}
		return err
	}
}

// TestFailedDuplicateEnqueueKeepsTheOriginalsPlace: a
// webhook redelivered while its message waits for a retry (a 503) enqueues
// it again; that duplicate enqueue's context ends right after its join (the
// webhook's caller gave up), so its enqueue fails. The original must keep
// its place: the next message of the chat does not overtake it, and the
// two never run at once.
func TestFailedDuplicateEnqueueKeepsTheOriginalsPlace(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("dup", nil)
	c := e.conv("dup")
	m1 := queue.Message{AgentID: agent, Conversation: c, MessageID: "m1",
		Text: fmt.Sprintf("[[sim status=503 times=2 think=%s]] m1", simDur(300*time.Millisecond))}
	r1 := e.enqueue(m1)
	waitState(t, e, r1.TaskID, asynq.TaskStateRetry, 20*time.Second)

	// The redelivery, through a client whose sequencer's Redis cancels the
	// enqueue's context once the join answered.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &cancelAfterJoin{line: e.prefix + "ord:line:", cancel: cancel}
	rdb.AddHook(hook)
	seq, err := ordering.New(rdb, ordering.Config{Prefix: e.prefix + "ord:"})
	if err != nil {
		t.Fatal(err)
	}
	dup, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: time.Hour, Replies: e.replies, Ordering: queue.Ordering{Sequencer: seq}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = dup.Close() })
	if _, err := dup.Enqueue(ctx, m1); !errors.Is(err, context.Canceled) || !hook.fired.Load() {
		t.Fatalf("duplicate enqueue: %v (join seen %v); want it cancelled after its join", err, hook.fired.Load())
	}

	m2 := queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "[[sim answer=two]] m2"}
	r2 := e.enqueue(m2)
	if r2.Position != 1 {
		t.Errorf("m2 joined at position %d, want 1 (behind m1)", r2.Position)
	}
	for _, r := range []queue.EnqueueResult{r1, r2} {
		if f, evs := e.waitFinal(c, r.TaskID, 30*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: final %+v; %s", r.TaskID, f, summarize(evs))
		}
	}
	checkOrder(t, e.sim, agent, []string{"m1", "m2"})
	checkSerialRuns(t, e.sim, agent, 2)
}

// TestDeadHeadCheckLooksInTheHeadsQueue: with workers
// on two queues (LETTAQ_QUEUES), a chat's m1 in queue A waits for a retry
// (a 503) at the head of the line while m2 of the same chat, in queue B,
// asks for its turn: m1 is alive (in A), so m2 waits for it.
func TestDeadHeadCheckLooksInTheHeadsQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	qb := e.queue + "-b"
	t.Cleanup(func() { _ = e.insp.DeleteQueue(qb, true) })
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Queues = map[string]int{e.queue: 1, qb: 1}
		c.Ordering.Config.DeadHeadGrace = 10 * time.Millisecond
	})
	ob := e.ordering()
	ob.WaitCheck = 100 * time.Millisecond
	cb, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: qb,
		Retention: time.Hour, Replies: e.replies, Ordering: ob})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cb.Close() })
	agent := e.sim.CreateAgent("queues", nil)
	c := e.conv("queues")
	r1 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "[[sim status=503 times=4]] m1"})
	waitState(t, e, r1.TaskID, asynq.TaskStateRetry, 20*time.Second)
	r2, err := cb.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello m2"})
	if err != nil || r2.Position != 1 {
		t.Fatalf("m2 in queue %s: %+v, %v; want position 1", qb, r2, err)
	}
	for _, r := range []queue.EnqueueResult{r1, r2} {
		if f, evs := e.waitFinal(c, r.TaskID, 40*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: final %+v; %s", r.TaskID, f, summarize(evs))
		}
	}
	checkOrder(t, e.sim, agent, []string{"m1", "m2"})
	checkSerialRuns(t, e.sim, agent, 2)
}

// TestPutBackOnTheLastAttemptIsNotArchived: with
// MaxRetry 1, a turn's first attempt fails (a 503: its one retry used) and
// its second is refused 409 busy (a put-back, not a failure). Asynq v0.26
// archives a task whose retries are used up whatever its handler returned:
// the put-back must not lose the message. It is answered.
func TestPutBackOnTheLastAttemptIsNotArchived(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	short, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: time.Hour, Replies: e.replies, Ordering: e.ordering(), MaxRetry: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = short.Close() })
	agent := e.sim.CreateAgent("lastput", nil)
	c := e.conv("lastput")
	e.sim.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503, Times: 2}) // the send and its resend
	r, err := short.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	waitState(t, e, r.TaskID, asynq.TaskStateRetry, 20*time.Second)
	e.sim.SetFault(agent, lettasim.Fault{Busy: true})
	deadline := time.Now().Add(30 * time.Second)
	for {
		evs := e.events(c, r.TaskID)
		if n := countFinal(evs); n > 0 {
			final := evs[len(evs)-1]
			if final.Type != record.EventAnswer {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			break
		}
		if info, err := e.insp.GetTaskInfo(e.queue, r.TaskID); err == nil && info.State == asynq.TaskStateArchived {
			rec, _ := e.journal.Get(context.Background(), r.TaskID)
			t.Fatalf("task archived (retried %d of %d, last error %q) with no final event; journal outcome %q; %s",
				info.Retried, info.MaxRetry, info.LastErr, rec.Outcome, describeAttempts(rec))
		}
		if time.Now().After(deadline) {
			t.Fatalf("no final event; %s", summarize(e.events(c, r.TaskID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	rec := e.record(r.TaskID)
	busy := 0
	for _, a := range rec.Attempts {
		if a.Outcome == record.OutcomeBusy {
			busy++
		}
	}
	if rec.Outcome != record.OutcomeAnswered || busy != 1 {
		t.Errorf("journal outcome %q with %d busy attempts, want answered after 1; %s", rec.Outcome, busy, describeAttempts(rec))
	}
	if n := e.sim.CountOtid(r.Otid); n != 1 {
		t.Errorf("%d user messages stored, want 1", n)
	}
}

// TestPutBackWithNoRetryLeftEndsWithAFinalEvent: a task with no retry left
// (Asynq MaxRetry 0, as a client of another language may set, or a task
// whose last retry a crash used) refused 409 busy cannot be put back (Asynq
// would archive it): it ends with a permanent error event and a failed
// journal, and leaves its line, never archived in silence.
func TestPutBackWithNoRetryLeftEndsWithAFinalEvent(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("noretry", nil)
	c := e.conv("noretry")
	e.sim.SetFault(agent, lettasim.Fault{Busy: true})
	m := queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hi", EnqueuedAt: time.Now().UTC()}
	b, err := queue.EncodePayload(m)
	if err != nil {
		t.Fatal(err)
	}
	id := queue.TaskIDFor(m)
	ac := asynq.NewClient(e.redisOpt())
	t.Cleanup(func() { _ = ac.Close() })
	if _, err := ac.Enqueue(asynq.NewTask(queue.TaskType, b), append(e.client.TaskOptions(id), asynq.MaxRetry(0))...); err != nil {
		t.Fatal(err)
	}
	final, evs := e.waitFinal(c, id, 20*time.Second)
	if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "busy") {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	if rec := e.record(id); rec.Outcome != record.OutcomeFailed {
		t.Errorf("journal outcome %q; %s", rec.Outcome, describeAttempts(rec))
	}
	e.settled()
	seq, err := ordering.New(e.rdb, e.ordering().Config)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := seq.Position(context.Background(), e.ordering().Key(m), id); err != nil || n != -1 {
		t.Errorf("position in the line after the failure: %d, %v; want -1 (left it)", n, err)
	}
}

// TestDeadHeadRemovedByALaterTurnWakesTheNewHead: the head of a
// line is a task that was never enqueued (its client died between join and
// enqueue); m2 waits behind it, scheduled a minute ahead (the safety net of
// Ordering.WaitCheck); m3, third, runs first and removes the dead head. m2
// is now the head: m3 wakes it, so that it runs now, not a minute later.
func TestDeadHeadRemovedByALaterTurnWakesTheNewHead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Ordering.Config.DeadHeadGrace = 10 * time.Millisecond })
	agent := e.sim.CreateAgent("ghost", nil)
	c := e.conv("ghost")
	seq, err := ordering.New(e.rdb, e.ordering().Config)
	if err != nil {
		t.Fatal(err)
	}
	m2 := queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello m2"}
	if _, err := seq.Join(context.Background(), e.ordering().Key(m2), "ghost"); err != nil {
		t.Fatal(err)
	}
	r2 := e.enqueue(m2)
	r3 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m3", Text: "hello m3"})
	if r2.Position != 1 || r3.Position != 2 {
		t.Fatalf("positions %d, %d; want 1, 2", r2.Position, r3.Position)
	}
	if err := e.insp.RunTask(e.queue, r3.TaskID); err != nil { // m3 runs before its turn
		t.Fatal(err)
	}
	for _, r := range []queue.EnqueueResult{r2, r3} {
		if f, evs := e.waitFinal(c, r.TaskID, 15*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: final %+v; %s", r.TaskID, f, summarize(evs))
		}
	}
	checkOrder(t, e.sim, agent, []string{"m2", "m3"})
}
