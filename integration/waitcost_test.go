package integration

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// redisCommands is the Redis server's total_commands_processed.
func redisCommands(t *testing.T, e *env) int64 {
	t.Helper()
	s, err := e.rdb.Info(context.Background(), "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "total_commands_processed:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	t.Fatal("no total_commands_processed")
	return 0
}

// TestApprovalWaitCost24h: a message waits 24 h behind
// an approval request nobody answers (LETTAQ_APPROVAL_TIMEOUT's default),
// with time scaled by 1/6000: the safety net of 10 min is 100 ms, the 24 h
// are 14.4 s. It prints the Redis commands the wait cost (the Redis is the
// test's own; an idle period of the same workers first gives the
// baseline) and the size of the message's journal record, which stays
// constant. When waiting was a retry, the message was run again every 5 s: 17,280
// attempts in 24 h, each one more Attempt in its record.
func TestApprovalWaitCost24h(t *testing.T) {
	if testing.Short() {
		t.Skip("14 s")
	}
	const scale = 6000
	day := 24 * time.Hour / scale
	srv := testredis.StartPersistent(t).Server()
	e := newEnv(t, withRedis(srv), withThreadMode(queue.ThreadConversation))
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Ordering.WaitCheck = 10 * time.Minute / scale
		c.Timing.DelayedTaskCheckInterval = 50 * time.Millisecond // (scaled too: Asynq's forwarder runs the looks)
		c.Approvals.Timeout = day
	})
	agent := e.sim.CreateAgent("cost", nil)
	c := e.conv("cost")

	// Baseline: what the idle worker costs (Asynq's polling) over a while.
	const idle = 2 * time.Second
	b0 := redisCommands(t, e)
	time.Sleep(idle)
	baseline := float64(redisCommands(t, e)-b0) / idle.Seconds()
	req, _ := e.requestApproval(agent, c, "m1", "delete_file")

	qi0, err := e.insp.GetQueueInfo(e.queue)
	if err != nil {
		t.Fatal(err)
	}
	c0, t0 := redisCommands(t, e), time.Now()
	msg := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello"})
	key := e.prefix + "journal:turn:" + msg.TaskID
	var sizes []int64
	for _, at := range []time.Duration{day / 4, day / 2, 3 * day / 4} {
		time.Sleep(time.Until(t0.Add(at)))
		n, _ := e.rdb.StrLen(context.Background(), key).Result()
		sizes = append(sizes, n)
	}
	if f, evs := e.waitFinal(c, msg.TaskID, 2*day); f.Type != record.EventAnswer {
		t.Fatalf("message: %+v; %s", f, summarize(evs))
	}
	waited := time.Since(t0)
	spent := float64(redisCommands(t, e)-c0) - baseline*waited.Seconds()
	qi1, err := e.insp.GetQueueInfo(e.queue)
	if err != nil {
		t.Fatal(err)
	}
	rec := e.record(msg.TaskID)
	final, _ := e.rdb.StrLen(context.Background(), key).Result()
	checks := qi1.ProcessedTotal - qi0.ProcessedTotal - 2 // less the message's own run and the expiry's
	perLook := spent / float64(max(checks, 1))
	t.Logf("a message waiting 24 h (scaled: %v) behind approval request %s: %d looks (Asynq tasks processed; Asynq's schedule has 1 s resolution, so a scaled run looks more often than 1 per 10 min), "+
		"%.0f Redis commands beyond the idle worker's %.0f/s, %.0f per look: at one look per 10 min, %.0f commands a day; "+
		"journal record %v bytes at 6 h, 12 h, 18 h, %d bytes at the end (%d attempt, %d wait: %+v)",
		waited.Round(time.Millisecond), req.TaskID, checks, spent, baseline, perLook, perLook*144, sizes, final,
		len(rec.Attempts), len(rec.Waits), rec.Waits)
	if len(rec.Attempts) != 1 || len(rec.Waits) != 1 {
		t.Errorf("journal: %d attempts, %d waits; want 1 and 1", len(rec.Attempts), len(rec.Waits))
	}
	// Constant: the same fields each time (updated_at, written with
	// RFC3339Nano, drops trailing zeros: a few bytes either way).
	if slices.Max(sizes)-slices.Min(sizes) > 8 {
		t.Errorf("the journal record changed size while the message waited: %v", sizes)
	}
	if checks < 10 {
		t.Errorf("%d looks: the message did not look again while it waited", checks)
	}
}
