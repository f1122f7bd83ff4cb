package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/asynqlog"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/health"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
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
	w, err := NewWorker(WorkerConfig{Redis: opt, Letta: LettaConnection{URL: "http://127.0.0.1:1"}, Queues: map[string]int{q: 1},
		Stores:   WorkerStores{RedisClient: rdb, RepliesOptions: RepliesOptions{Prefix: prefix}, JournalOptions: JournalOptions{Prefix: prefix}},
		Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() {
		ctx := context.Background()
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		_ = c.Close()
		rdb.Del(ctx, shard.RecordKey(q))
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
	if err := w.lines.Parking().Park(ctx, p); err != nil {
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
	conv := record.Conversation{Integration: "web", ChatID: "park-1"}
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
	alive := w.lines.AliveOrParked(ordering.InspectorAlive(insp, q))
	if ok, err := alive(ctx, r2.TaskID); !ok || err != nil {
		t.Errorf("a parked task is alive: %v, %v", ok, err)
	}
	w.lines.Sweep(ctx)
	if _, err := insp.GetTaskInfo(q, r2.TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Fatalf("a young record was swept: %v", err)
	}

	// Old now: swept.
	young.Since = time.Now().Add(-time.Minute)
	if err := w.lines.Parking().Park(ctx, young); err != nil {
		t.Fatal(err)
	}
	w.lines.Sweep(ctx)
	info, err := insp.GetTaskInfo(q, r2.TaskID)
	if err != nil {
		t.Fatalf("the sweeper did not enqueue the task again: %v", err)
	}
	if info.State != asynq.TaskStateScheduled || time.Until(info.NextProcessAt) < 9*time.Minute || info.Retried != 0 ||
		string(info.Payload) != string(before.Payload) || info.MaxRetry != before.MaxRetry || info.Timeout != before.Timeout || info.Retention != before.Retention {
		t.Errorf("restored task %+v; want scheduled ~10 min ahead as it was before: %+v", info, before)
	}
	if _, err := w.lines.Parking().Get(ctx, r2.TaskID); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("the record stays after the sweep: %v", err)
	}
	if w.lines.Sweeps() != 1 {
		t.Errorf("%d sweeps, want 1", w.lines.Sweeps())
	}

	// Woken while parked (the turn ahead ended): pending.
	parkAndDie(t, w, insp, q, r2.TaskID, time.Now().Add(-time.Minute))
	if err := w.lines.WakeTask(ctx, q, c.cfg.Ordering.Key(Message{AgentID: "agent-1", Conversation: conv}), r2.TaskID); err != nil {
		t.Fatal(err)
	}
	w.lines.Sweep(ctx)
	if info, err := insp.GetTaskInfo(q, r2.TaskID); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("woken while parked: %+v, %v; want pending", info, err)
	}
	_ = r1
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

// Without ordering, a message that read its chat's approval request as
// pending and parks after the answer was recorded (and its waiters woken,
// before the message was noted among them) wakes itself: its parking
// record is marked woken, so its re-enqueue makes it pending at once
// instead of a WaitCheck later.
func TestParkApprovalWakesItselfWhenAnsweredMeanwhile(t *testing.T) {
	c, w, insp, q := parkingEnvWith(t, true)
	ctx := context.Background()
	if w.ord != nil || w.lines == nil {
		t.Fatalf("ordering off: orderer %v, lines %v; want none, one", w.ord, w.lines)
	}
	conv := record.Conversation{Integration: "web", ChatID: "park-race"}
	r, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "hi", Conversation: conv, MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := insp.GetTaskInfo(q, r.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	req := &approval.Pending{RequestTaskID: "turn:web:park-race:m1", AgentID: "agent-1", Conversation: conv, Queue: q,
		Scope: "chat:" + conv.String(), Calls: []record.ToolEvent{{Name: "delete_file", CallID: "call-1"}},
		RequestedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC()}
	if err := w.approvals.Store().Save(ctx, req); err != nil {
		t.Fatal(err)
	}
	stale := *req // what the message's gate read
	if err := w.approvals.Store().Answered(ctx, req, AnswerTaskID(req.RequestTaskID), nil, time.Now()); err != nil {
		t.Fatal(err)
	}
	w.lines.WakeApprovalWaiters(ctx, req.RequestTaskID, "") // the answer's wake-up: nobody noted yet
	w.lines.AfterRevoke = func(store.Parked) {}             // the re-enqueue is looked at below
	tt := &attempt.Pipeline{W: w.attempts, Rn: fence.Runner{ID: r.TaskID}, Logger: w.log, Jr: attemptJournal(w, &record.TurnRecord{TaskID: r.TaskID, Attempts: []record.Attempt{{N: 1}}}), Progress: w.writer.NewQueue(conv, func(error) {}, nil), ID: attempt.ID{TaskID: r.TaskID, Queue: q, Task: asynq.NewTask(info.Type, info.Payload), Start: time.Now()}}
	tt.Line = w.lines.Place(line.Attempt{TaskID: r.TaskID, Queue: q, Runner: r.TaskID, Task: tt.Task, Log: w.log})
	attempt.ForTest(tt, false)
	if err := tt.Waiting().ParkApproval(ctx, w.log, &stale); !errors.Is(err, asynq.RevokeTask) {
		t.Fatalf("parkApproval: %v; want parked", err)
	}
	p, err := w.lines.Parking().Get(ctx, r.TaskID)
	if err != nil || !p.Woken {
		t.Errorf("the parked message's record: woken %v, %v; want woken", p.Woken, err)
	}
}
