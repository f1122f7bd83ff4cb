package integration

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// slowRedis delays every command by d: a Redis that is slow (or failing over).
type slowRedis struct{ d time.Duration }

func (h slowRedis) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h slowRedis) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		time.Sleep(h.d)
		return next(ctx, cmd)
	}
}

func (h slowRedis) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(h.d)
		return next(ctx, cmds)
	}
}

// Progress events are written off the stream's reader: with every reply write taking longer
// than the stall clock (300ms here), a turn full of events (tool call, tool return, phases,
// answer text) is still read to its end without a stall, and its events arrive in order with
// the final one last.
func TestSlowRedisDoesNotStallTheStream(t *testing.T) {
	// Delivery is given time for a slow Redis, as an operator of one would.
	e := newEnv(t, withBudget(func(b *budget.Config) { b.DeliveryAllowance = 5 * time.Second }))
	slow := redis.NewClient(e.redis.Options())
	slow.AddHook(slowRedis{d: 400 * time.Millisecond})
	t.Cleanup(func() { _ = slow.Close() })
	var writes atomic.Int32
	slow.AddHook(countHook{&writes})
	e.startWorker("A", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(slow, queue.RepliesOptions{Prefix: e.prefix})
	})
	agent := e.sim.CreateAgent("slow-redis", nil)
	c := e.conv("slow-redis")
	r := e.enqueue(queue.Message{AgentID: agent, Conversation: c,
		Text: "[[sim tool=web_search,fetch tool_delay=" + simDur(50*time.Millisecond).String() + " answer=done]] go"})
	final, evs := e.waitFinal(c, r.TaskID, 60*time.Second)
	if final.Type != record.EventAnswer || final.Text != "done" {
		t.Fatalf("final %s %q; %s", final.Type, final.Text, summarize(evs))
	}
	e.settled()
	rec := e.record(r.TaskID)
	if len(rec.Attempts) != 1 || rec.Attempts[0].TimeoutClock != "" || rec.Attempts[0].Polls != 0 || rec.Attempts[0].Resumes != 0 {
		t.Fatalf("the stream was not read through: attempts %+v", rec.Attempts)
	}
	all := e.events(c, r.TaskID)
	last := int64(0)
	for i, ev := range all {
		if ev.Seq <= last {
			t.Fatalf("event %d (%s) seq %d after %d", i, ev.Type, ev.Seq, last)
		}
		last = ev.Seq
		if ev.Type.Final() && i != len(all)-1 {
			t.Fatalf("final event is not last: %s", summarize(all))
		}
	}
	// Each of these slow writes would have held the reader longer than the stall clock (the
	// writer batches the events that wait, so there are fewer writes than events).
	if len(all) < 8 || writes.Load() < 3 {
		t.Fatalf("%d slow writes for %d events: the turn must make many events and wait on Redis; %s", writes.Load(), len(all), summarize(all))
	}
	t.Logf("%d slow writes; %d events in the stream: %s", writes.Load(), len(all), summarize(all))
}

type countHook struct{ n *atomic.Int32 }

func (h countHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { h.n.Add(1); return next(ctx, cmd) }
}
func (h countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { h.n.Add(1); return next(ctx, cmds) }
}
