package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// inFlight counts what an Observer hears of attempts: started less finished
// is the attempts in flight, as lettaq_attempts_in_flight counts them.
type inFlight struct {
	queue.NopObserver
	mu                      sync.Mutex
	now, lowest             int
	started, finished       int
	turns                   map[string]int
	finishedWhy, finishedOK []string
}

func (o *inFlight) TaskStarted(string, int, time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.started++
	o.now++
}

func (o *inFlight) AttemptFinished(_, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.finished++
	o.now--
	o.lowest = min(o.lowest, o.now)
	o.finishedWhy = append(o.finishedWhy, result)
}

func (o *inFlight) TurnFinished(_, outcome string, _, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turns[outcome]++
}

func (o *inFlight) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return fmt.Sprintf("in flight %d (lowest %d), started %d, finished %d %v, turns %v",
		o.now, o.lowest, o.started, o.finished, o.finishedWhy, o.turns)
}

// redisDown is a go-redis hook that starts an outage the first time a
// pipeline carries a command that trigger matches: for length, every
// command and pipeline fails unsent, as with a Redis that stopped
// answering.
type redisDown struct {
	trigger func(redis.Cmder) bool
	length  time.Duration

	mu    sync.Mutex
	fired bool
	until time.Time
}

var errRedisDown = errors.New("dial tcp 127.0.0.1:6379: connect: connection refused")

func (h *redisDown) down(cmds []redis.Cmder) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if !h.fired {
		for _, c := range cmds {
			if h.trigger(c) {
				h.fired, h.until = true, now.Add(h.length)
				break
			}
		}
	}
	if !now.Before(h.until) {
		return false
	}
	for _, c := range cmds {
		c.SetErr(errRedisDown)
	}
	return true
}

func (h *redisDown) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *redisDown) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.down([]redis.Cmder{cmd}) {
			return errRedisDown
		}
		return next(ctx, cmd)
	}
}
func (h *redisDown) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.down(cmds) {
			return errRedisDown
		}
		return next(ctx, cmds)
	}
}

func (h *redisDown) hasFired() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.fired
}

// startWithRedisDown runs a worker whose own Redis client (replies,
// journal, ordering: not Asynq's) goes through hook, and an Observer
// counting attempts in flight.
func startWithRedisDown(e *env, hook *redisDown) *inFlight {
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	rdb.AddHook(hook)
	e.t.Cleanup(func() { _ = rdb.Close() })
	obs := &inFlight{turns: map[string]int{}}
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.RedisClient = rdb
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
		c.Observer = obs
	})
	return obs
}

// checkBalanced fails when the attempts in flight an Observer counted went
// below zero or did not end at zero.
func (o *inFlight) checkBalanced(t *testing.T) {
	t.Helper()
	t.Log(o)
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.lowest < 0 || o.now != 0 || o.started != o.finished {
		t.Errorf("attempts in flight went to %d and ended at %d (started %d, finished %d %v); turns %v",
			o.lowest, o.now, o.started, o.finished, o.finishedWhy, o.turns)
	}
}

// A turn whose start meets Redis down (its record cannot be read) is
// retried; the attempt that could not start is not counted as finished
// without having been counted as started: the attempts in flight never go
// below zero and end at zero.
func TestAttemptsInFlightAfterStartOutage(t *testing.T) {
	e := newEnv(t)
	hook := &redisDown{length: 500 * time.Millisecond, trigger: func(c redis.Cmder) bool {
		a := c.Args()
		return c.Name() == "get" && len(a) > 1 && strings.HasPrefix(fmt.Sprint(a[1]), e.prefix+"journal:turn:")
	}}
	obs := startWithRedisDown(e, hook)
	agent := e.sim.CreateAgent("start-outage", nil)
	c := e.conv("start-outage")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1",
		Text: fmt.Sprintf("[[sim think=%s answer=one]] hi", simDur(50*time.Millisecond))})
	if final, _ := e.waitFinal(c, res.TaskID, 60*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("final %+v", final)
	}
	e.settled()
	if !hook.hasFired() {
		t.Fatal("the start's read never met the outage")
	}
	obs.checkBalanced(t)
}

// An attempt whose answer cannot be delivered because Redis went down
// (its final write, and the journal's retry after it, fail) is journaled
// with its end and outcome retrying once Redis answers again; the next
// attempt delivers the answer.
func TestUndeliveredAttemptJournaledAfterOutage(t *testing.T) {
	e := newEnv(t)
	hook := &redisDown{length: time.Second, trigger: func(c redis.Cmder) bool { return carriesKey(c, e.prefix+"answered:") }}
	obs := startWithRedisDown(e, hook)
	agent := e.sim.CreateAgent("final-outage", nil)
	c := e.conv("final-outage")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1",
		Text: fmt.Sprintf("[[sim think=%s answer=one]] hi", simDur(50*time.Millisecond))})
	final, _ := e.waitFinal(c, res.TaskID, 60*time.Second)
	if final.Type != record.EventAnswer || final.Text != "one" {
		t.Fatalf("final %+v", final)
	}
	e.settled()
	if !hook.hasFired() {
		t.Fatal("the final write never met the outage")
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeAnswered || len(rec.Attempts) < 2 {
		t.Fatalf("journal outcome %q; %s", rec.Outcome, describeAttempts(rec))
	}
	for _, a := range rec.Attempts {
		if a.End.IsZero() || a.Outcome == "" {
			t.Errorf("attempt %d has end %v and outcome %q; %s", a.N, a.End, a.Outcome, describeAttempts(rec))
		}
	}
	if a := rec.Attempts[0]; a.Outcome != record.OutcomeRetrying {
		t.Errorf("attempt 1 outcome %q, want %q", a.Outcome, record.OutcomeRetrying)
	}
	if n := countFinal(e.events(c, res.TaskID)); n != 1 {
		t.Errorf("%d final events", n)
	}
	obs.checkBalanced(t)
}
