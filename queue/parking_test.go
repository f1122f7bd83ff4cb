package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/asynqlog"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/health"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// parkingEnv is a Client and a Worker (not running) on a queue and key
// prefix of the test's own, under ordering.
func parkingEnv(t *testing.T) (*Client, *Worker, *asynq.Inspector, string) {
	return parkingEnvWith(t, false)
}

// parkingEnvWith is parkingEnv, with ordering off when off.
func parkingEnvWith(t *testing.T, off bool) (*Client, *Worker, *asynq.Inspector, string) {
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-park-" + time.Now().Format("150405.000000")
	prefix := "lettaq-unit:" + q + ":"
	rdb := srv.Client(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	ord := Ordering{Off: off, Config: ordering.Config{Prefix: prefix + "ord:"}}
	replies := NewReplies(rdb, RepliesOptions{Prefix: prefix})
	c, err := NewClient(ClientConfig{Redis: opt, Queue: q, Ordering: ord, Replies: replies})
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(WorkerConfig{Redis: opt, RedisClient: rdb, LettaURL: "http://127.0.0.1:1", Queues: map[string]int{q: 1},
		RepliesOptions: RepliesOptions{Prefix: prefix}, JournalOptions: JournalOptions{Prefix: prefix}, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		_ = c.Close()
		w.closeRedis()
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	return c, w, insp, q
}

// parkAndDie does what a worker does when a turn parks, up to the revoke
// (its record written, Asynq's task deleted), and dies there: the
// re-enqueue never happens.
func parkAndDie(t *testing.T, w *Worker, insp *asynq.Inspector, q, id string, since time.Time) store.Parked {
	t.Helper()
	ctx := context.Background()
	info, err := insp.GetTaskInfo(q, id)
	if err != nil {
		t.Fatal(err)
	}
	p := store.Parked{TaskID: id, Type: info.Type, Payload: info.Payload, Queue: q, MaxRetry: info.MaxRetry,
		Timeout: info.Timeout, Retention: info.Retention, Behind: "turn:ahead", Reason: "waiting for the turn ahead",
		Since: since, Gen: "g1"}
	if err := w.park.st.Park(ctx, p); err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask(q, id); err != nil { // what RevokeTask does
		t.Fatal(err)
	}
	return p
}

// A worker that died between a park's revoke and its re-enqueue leaves a
// record and no task: another worker's sweeper enqueues the task again,
// with its id, payload and options, scheduled far ahead (not a retry: the
// retry count is 0); a record woken meanwhile makes it pending. While
// parked, the task counts as alive for the dead-head check. A young record
// is left to its worker.
func TestSweeperRestoresAParkedTaskLeftBehind(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	conv := Conversation{Integration: "web", ChatID: "park-1"}
	r1, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "first", Conversation: conv, MessageID: "m1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "second", Conversation: conv, MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	before, err := insp.GetTaskInfo(q, r2.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if before.State != asynq.TaskStateScheduled || time.Until(before.NextProcessAt) < 9*time.Minute {
		t.Errorf("a turn behind another: %v, next process at %v; want scheduled ~10 min ahead", before.State, before.NextProcessAt)
	}
	young := parkAndDie(t, w, insp, q, r2.TaskID, time.Now())
	alive := w.aliveOrParked(ordering.InspectorAlive(insp, q))
	if ok, err := alive(ctx, r2.TaskID); !ok || err != nil {
		t.Errorf("a parked task is alive: %v, %v", ok, err)
	}
	w.park.sweep(ctx)
	if _, err := insp.GetTaskInfo(q, r2.TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("a young record was swept: %v", err)
	}

	// Old now: swept.
	young.Since = time.Now().Add(-time.Minute)
	if err := w.park.st.Park(ctx, young); err != nil {
		t.Fatal(err)
	}
	w.park.sweep(ctx)
	info, err := insp.GetTaskInfo(q, r2.TaskID)
	if err != nil {
		t.Fatalf("the sweeper did not enqueue the task again: %v", err)
	}
	if info.State != asynq.TaskStateScheduled || time.Until(info.NextProcessAt) < 9*time.Minute || info.Retried != 0 ||
		string(info.Payload) != string(before.Payload) || info.MaxRetry != before.MaxRetry || info.Timeout != before.Timeout || info.Retention != before.Retention {
		t.Errorf("restored task %+v; want scheduled ~10 min ahead as it was before: %+v", info, before)
	}
	if _, err := w.park.st.Get(ctx, r2.TaskID); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("the record stays after the sweep: %v", err)
	}
	if w.park.sweeps.Load() != 1 {
		t.Errorf("%d sweeps, want 1", w.park.sweeps.Load())
	}

	// Woken while parked (the turn ahead ended): pending.
	parkAndDie(t, w, insp, q, r2.TaskID, time.Now().Add(-time.Minute))
	if err := w.wakeTask(ctx, q, c.cfg.Ordering.Key(Message{AgentID: "agent-1", Conversation: conv}), r2.TaskID); err != nil {
		t.Fatal(err)
	}
	w.park.sweep(ctx)
	if info, err := insp.GetTaskInfo(q, r2.TaskID); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("woken while parked: %+v, %v; want pending", info, err)
	}
	_ = r1
}

// unpark (for a cancel) deletes a waiting task, scheduled or parked: a
// parked one is not enqueued again by its re-enqueue; an unknown task is
// not found.
func TestUnparkDropsAWaitingTurn(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	conv := Conversation{Integration: "web", ChatID: "park-2"}
	if _, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "first", Conversation: conv, MessageID: "m1"}); err != nil {
		t.Fatal(err)
	}
	r2, _ := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "second", Conversation: conv, MessageID: "m2"})
	r3, _ := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "third", Conversation: conv, MessageID: "m3"})
	parkAndDie(t, w, insp, q, r3.TaskID, time.Now())
	for _, id := range []string{r2.TaskID, r3.TaskID} {
		if found, err := w.unpark(ctx, q, id); !found || err != nil {
			t.Errorf("unpark %s: %v, %v", id, found, err)
		}
		if _, err := insp.GetTaskInfo(q, id); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("%s still in Asynq: %v", id, err)
		}
	}
	// The re-enqueue of the parked one (its worker was not dead, only
	// slow) puts nothing back.
	p, err := w.park.st.Get(ctx, r3.TaskID)
	if err != nil || !p.Dropped {
		t.Fatalf("the parked turn's record: %+v, %v; want dropped", p, err)
	}
	p.Dropped = false // as the worker's goroutine has it, read before the drop
	if err := w.park.enqueue(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.GetTaskInfo(q, r3.TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the dropped turn was enqueued again: %v", err)
	}
	if _, err := w.park.st.Get(ctx, r3.TaskID); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("the dropped turn's record stays: %v", err)
	}
	if found, err := w.unpark(ctx, q, "turn:nope"); found || err != nil {
		t.Errorf("unknown task: %v, %v", found, err)
	}
}

// One wait per thing waited behind: looking again behind the same adds
// nothing; the answer turn of the approval request waited for is the same
// wait; something else closes the wait and opens another; endWaits closes
// the last.
func TestAddWaitMergesLooks(t *testing.T) {
	rec := &TurnRecord{}
	t0 := time.Now()
	if !addWait(rec, "approval request turn:a", "r", t0) || addWait(rec, "approval request turn:a", "r", t0.Add(time.Minute)) ||
		addWait(rec, AnswerTaskID("turn:a"), "r", t0.Add(2*time.Minute)) || addWait(rec, answerTaskIDAfter("turn:a", 1), "r", t0.Add(3*time.Minute)) {
		t.Fatalf("looks again added waits: %+v", rec.Waits)
	}
	if !addWait(rec, "turn:b", "r", t0.Add(4*time.Minute)) || len(rec.Waits) != 2 || !rec.Waits[0].Until.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("a new wait: %+v", rec.Waits)
	}
	endWaits(rec, t0.Add(5*time.Minute))
	if openWait(rec) != nil || !rec.Waits[1].Until.Equal(t0.Add(5*time.Minute).UTC()) {
		t.Fatalf("ended: %+v", rec.Waits)
	}
}

// Asynq's "revoke task id=…" warning, written for every turn that parks,
// is a debug line, not a warning; its other warnings stay warnings.
func TestRevokeIsNotAWarning(t *testing.T) {
	var buf strings.Builder
	l := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	a := asynqlog.New(l, &asynqlog.Permanent{}, &health.Health{})
	a.Warn("revoke task id=turn:web:1:m2")
	a.Warn("something else")
	out := buf.String()
	if !strings.Contains(out, "level=DEBUG") || !strings.Contains(out, "task_id=turn:web:1:m2") || strings.Contains(out, "level=WARN msg=\"revoke") {
		t.Errorf("revoke logged as %q", out)
	}
	if !strings.Contains(out, "level=WARN msg=\"something else\"") {
		t.Errorf("other warnings: %q", out)
	}
}

// A parked task is enqueued again with the retries it had left: Retried 2
// of MaxRetry 5 comes back as Retried 0 of MaxRetry 3, so a turn that used
// retries before it waited does not get them all again; one with none left
// keeps the one TaskMaxRetry keeps for put-backs.
func TestParkedTaskKeepsTheRetriesItHadLeft(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	for i, tc := range []struct{ retried, maxRetry, want int }{{2, 5, 3}, {5, 5, 1}, {0, 26, 26}} {
		r, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "hi", Conversation: Conversation{Integration: "web", ChatID: fmt.Sprint("park-r", i)},
			MessageID: "m1"})
		if err != nil {
			t.Fatal(err)
		}
		info, err := insp.GetTaskInfo(q, r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		active := *info // as an attempt that retried sees it
		active.Retried, active.MaxRetry = tc.retried, tc.maxRetry
		p := parkedOf(&active, asynq.NewTask(info.Type, info.Payload), "turn:ahead", "waiting for the turn ahead", "", "w1")
		if err := w.park.st.Park(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := insp.DeleteTask(q, r.TaskID); err != nil { // what RevokeTask does
			t.Fatal(err)
		}
		if err := w.park.enqueue(ctx, p); err != nil {
			t.Fatal(err)
		}
		back, err := insp.GetTaskInfo(q, r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if back.MaxRetry != tc.want || back.Retried != 0 || back.State != asynq.TaskStateScheduled {
			t.Errorf("retried %d of %d, parked: back %v with retried %d of %d; want scheduled with 0 of %d",
				tc.retried, tc.maxRetry, back.State, back.Retried, back.MaxRetry, tc.want)
		}
	}
}

// Without ordering, a message that read its chat's approval request as
// pending and parks after the answer was recorded (and its waiters woken,
// before the message was noted among them) wakes itself: its parking
// record is marked woken, so its re-enqueue makes it pending at once
// instead of a WaitCheck later.
func TestParkApprovalWakesItselfWhenAnsweredMeanwhile(t *testing.T) {
	c, w, insp, q := parkingEnvWith(t, true)
	ctx := context.Background()
	if w.ord != nil || w.park == nil {
		t.Fatalf("ordering off: orderer %v, parker %v; want none, one", w.ord, w.park)
	}
	conv := Conversation{Integration: "web", ChatID: "park-race"}
	r, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "hi", Conversation: conv, MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := insp.GetTaskInfo(q, r.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	req := &pendingApproval{RequestTaskID: "turn:web:park-race:m1", AgentID: "agent-1", Conversation: conv, Queue: q,
		Scope: "chat:" + conv.String(), Calls: []ToolEvent{{Name: "delete_file", CallID: "call-1"}},
		RequestedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC()}
	if err := w.approvals.save(ctx, req); err != nil {
		t.Fatal(err)
	}
	stale := *req // what the message's gate read
	if err := w.approvals.answered(ctx, req, AnswerTaskID(req.RequestTaskID), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	w.wakeApprovalWaiters(ctx, req.RequestTaskID, "") // the answer's wake-up: nobody noted yet
	w.park.afterRevoke = func(store.Parked) {}        // the re-enqueue is looked at below
	tt := &turn{w: w, taskID: r.TaskID, rn: fence.Runner{ID: r.TaskID}, queue: q, task: asynq.NewTask(info.Type, info.Payload),
		log: w.log, start: time.Now(), rec: &TurnRecord{TaskID: r.TaskID, Attempts: []Attempt{{N: 1}}},
		progress: w.writer.NewQueue(conv, func(error) {}, nil)}
	if err := tt.parkApproval(ctx, w.log, &stale); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("parkApproval: %v; want parked", err)
	}
	p, err := w.park.st.Get(ctx, r.TaskID)
	if err != nil || !p.Woken {
		t.Errorf("the parked message's record: woken %v, %v; want woken", p.Woken, err)
	}
}
