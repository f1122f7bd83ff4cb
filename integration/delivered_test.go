package integration

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// lateFinalHook lets the first write of a final event (the emit script with
// the answered marker) reach Redis, then reports a timeout: the write
// outlasted the delivery allowance but completed.
type lateFinalHook struct {
	marker string
	fired  atomic.Bool
}

func (h *lateFinalHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *lateFinalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if err != nil {
			return err
		}
		for _, cmd := range cmds {
			if h.final(cmd) {
				return context.DeadlineExceeded
			}
		}
		return nil
	}
}

// final reports whether cmd wrote the final event (a script with the answered marker among its
// keys); the first time, it also makes cmd report a timeout.
func (h *lateFinalHook) final(cmd redis.Cmder) bool {
	if cmd.Err() != nil || !carriesKey(cmd, h.marker) || !h.fired.CompareAndSwap(false, true) {
		return false
	}
	cmd.SetErr(context.DeadlineExceeded)
	return true
}
func (h *lateFinalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if err == nil && h.final(cmd) {
			return context.DeadlineExceeded
		}
		return err
	}
}

type turnCounter struct {
	queue.NopObserver
	mu    sync.Mutex
	turns map[string]int
}

func (o *turnCounter) TurnFinished(_, outcome string, _, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turns[outcome]++
}

// TestDeliveredAnswerFinishesTheTurn: the answer event reached the reply
// stream but its attempt heard a timeout. The turn must not be left looking
// unfinished: the journal gets outcome and finished_at,
// the task its result (the answer, taken from the final event), and the
// metrics count the turn once.
func TestDeliveredAnswerFinishesTheTurn(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("late", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "Delivered, late."},
	}})
	hook := &lateFinalHook{marker: e.prefix + "answered:"}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	obs := &turnCounter{turns: map[string]int{}}
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
		c.Observer = obs
	})
	c := e.conv("late")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "hi", Conversation: c, MessageID: "m1"})
	final, _ := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || final.Text != "Delivered, late." {
		t.Fatalf("final %+v", final)
	}
	e.settled()
	if !hook.fired.Load() {
		t.Fatal("the final write was never intercepted")
	}
	// The attempt that heard the timeout finds its event written (one attempt), or the next
	// attempt finishes the turn from it (two): either way the journal says answered.
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeAnswered || rec.FinishedAt.IsZero() || len(rec.Attempts) == 0 ||
		rec.Attempts[len(rec.Attempts)-1].Outcome != record.OutcomeAnswered {
		t.Fatalf("journal outcome %q finished_at %v; %s", rec.Outcome, rec.FinishedAt, describeAttempts(rec))
	}
	info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
	if err != nil || info.State != asynq.TaskStateCompleted {
		t.Fatalf("task info %+v: %v", info, err)
	}
	var tr queue.TurnResult
	if err := json.Unmarshal(info.Result, &tr); err != nil {
		t.Fatalf("result %q: %v", info.Result, err)
	}
	if tr.Outcome != record.OutcomeAnswered || tr.Answer != "Delivered, late." || tr.RunID == "" {
		t.Fatalf("result %+v", tr)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.turns) != 1 || obs.turns[record.OutcomeAnswered] != 1 {
		t.Fatalf("turns counted %v, want answered once", obs.turns)
	}
	if n := countFinal(e.events(c, res.TaskID)); n != 1 {
		t.Fatalf("%d final events", n)
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
}

// lostFinalHook drops the write of a final event (the emit script with the answered marker)
// from the pipeline that carries it, lets the rest of that pipeline through (the journal's
// finished record), and fails the next pipeline (the attempt's retry save): a Redis that
// refused one command and then went away. The next attempt must still deliver the answer.
type lostFinalHook struct {
	marker string
	state  atomic.Int32 // 0 waiting, 1 dropped the final write, 2 failed the save after it
}

func (h *lostFinalHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *lostFinalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *lostFinalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.state.CompareAndSwap(1, 2) {
			for _, c := range cmds {
				c.SetErr(errRedisGone)
			}
			return errRedisGone
		}
		if h.state.Load() != 0 {
			return next(ctx, cmds)
		}
		keep := cmds[:0:0]
		var dropped redis.Cmder
		for _, c := range cmds {
			if dropped == nil && carriesKey(c, h.marker) {
				dropped = c
				continue
			}
			keep = append(keep, c)
		}
		if dropped == nil {
			return next(ctx, cmds)
		}
		h.state.Store(1)
		err := next(ctx, keep)
		dropped.SetErr(errRedisGone)
		if err == nil {
			err = errRedisGone
		}
		return err
	}
}

var errRedisGone = errors.New("test: connection reset by peer")

func carriesKey(c redis.Cmder, prefix string) bool {
	if c.Name() != "evalsha" && c.Name() != "eval" {
		return false
	}
	for _, a := range c.Args() {
		if s, ok := a.(string); ok && strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

// TestJournaledFinishedWithoutFinalEventGoesOn: the round trip that writes a turn's final event
// also journals it finished; when the event's write is lost but the record's is not (and the
// attempt cannot journal its retry either), the next attempt must not take the turn for
// finished: it finds the run and delivers the answer, once.
func TestJournaledFinishedWithoutFinalEventGoesOn(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("lost-final", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "Here at last."},
	}})
	hook := &lostFinalHook{marker: e.prefix + "answered:"}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
	})
	c := e.conv("lost-final")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "hi", Conversation: c, MessageID: "m1"})
	final, _ := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer || final.Text != "Here at last." {
		t.Fatalf("final %+v", final)
	}
	e.settled()
	if hook.state.Load() != 2 {
		t.Fatalf("the hook did not drop the final write and fail the save after it (state %d)", hook.state.Load())
	}
	finals := 0
	for _, ev := range e.events(c, res.TaskID) {
		if ev.Type.Final() {
			finals++
		}
	}
	rec := e.record(res.TaskID)
	if finals != 1 || rec.Outcome != record.OutcomeAnswered || len(rec.Attempts) != 2 {
		t.Fatalf("%d final events, journal outcome %q; %s", finals, rec.Outcome, describeAttempts(rec))
	}
	if n := len(e.sim.UserMessages(agent)); n != 1 {
		t.Fatalf("%d user messages at Letta, want 1", n)
	}
}
