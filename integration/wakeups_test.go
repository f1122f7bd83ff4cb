package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// slowPark holds the first write of one task's parking record until
// release is closed, then for delay more: a park slower than the wake-up
// of the turn ahead looks for it.
type slowPark struct {
	key     string // the parking record's key
	release chan struct{}
	delay   time.Duration
	fired   atomic.Bool
	done    atomic.Int64 // when the held write went on (unix ns)
}

func (h *slowPark) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowPark) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next
}
func (h *slowPark) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if a := c.Args(); c.Name() == "hset" && len(a) > 1 && a[1] == h.key && h.fired.CompareAndSwap(false, true) {
				<-h.release
				time.Sleep(h.delay) // the slow park: the delay is what is tested
				h.done.Store(time.Now().UnixNano())
				break
			}
		}
		return next(ctx, cmds)
	}
}

// TestSlowParkIsWokenByTheTurnAhead: m2 runs while m1 holds the line, and
// its park (the write of its parking record) takes longer than the wake-up
// of m1's end looks for it (that gives up on an attempt that is still
// active after a second). The park reads the line again once its record is
// written: m2 heads it, free, and runs at once, not a WaitCheck (20 s
// here) later.
func TestSlowParkIsWokenByTheTurnAhead(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	agent := e.sim.CreateAgent("slowpark", nil)
	c := e.conv("slowpark")
	m2 := queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello m2"}
	hook := &slowPark{release: make(chan struct{}), delay: 2 * time.Second}
	const waitCheck = 20 * time.Second
	e.startWorker("w1", func(cfg *queue.WorkerConfig) {
		cfg.Ordering.WaitCheck = waitCheck
		rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
		t.Cleanup(func() { _ = rdb.Close() })
		rdb.AddHook(hook)
		cfg.Stores.RedisClient = rdb
	})
	r1 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: fmt.Sprintf("[[sim think=%s]] hello m1", simDur(time.Second))})
	r2 := e.enqueue(m2)
	hook.key = e.prefix + "park:" + r2.TaskID
	if err := e.insp.RunTask(e.queue, r2.TaskID); err != nil { // m2 looks while m1 runs
		t.Fatal(err)
	}
	if f, evs := e.waitFinal(c, r1.TaskID, 15*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("m1: final %+v; %s", f, summarize(evs))
	}
	if !hook.fired.Load() {
		t.Fatal("m2 did not park while m1 ran")
	}
	close(hook.release)
	if f, evs := e.waitFinal(c, r2.TaskID, waitCheck+10*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("m2: final %+v; %s", f, summarize(evs))
	}
	rec2 := e.record(r2.TaskID)
	parked := time.Unix(0, hook.done.Load())
	d := rec2.FirstStartedAt.Sub(parked)
	t.Logf("m2 started %v after its slow park's record was written (WaitCheck %v)", d.Round(time.Millisecond), waitCheck)
	if d > time.Second {
		t.Errorf("m2 started %v after its park, want within 1s (not its WaitCheck, %v)", d.Round(time.Millisecond), waitCheck)
	}
	checkOrder(t, e.sim, agent, []string{"m1", "m2"})
}
