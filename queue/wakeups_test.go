package queue

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// lineOf enqueues one message per id of chat on c, in order, and returns
// their task ids and the chat's line key.
func lineOf(t *testing.T, c *Client, chat string, ids ...string) ([]string, string) {
	t.Helper()
	conv := record.Conversation{Integration: "web", ChatID: chat}
	var out []string
	for _, id := range ids {
		r, err := c.Enqueue(context.Background(), Message{AgentID: "agent-1", Text: "hello " + id, Conversation: conv, MessageID: id})
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, r.TaskID)
	}
	return out, c.cfg.Ordering.Key(Message{AgentID: "agent-1", Conversation: conv})
}

// assertWoken fails the test unless id's parking record is marked woken.
func assertWoken(t *testing.T, w *Worker, id, what string) {
	t.Helper()
	p, err := w.lines.Parking().Get(context.Background(), id)
	if err != nil || !p.Woken {
		t.Errorf("%s: the parked turn %s: woken %v, %v; want woken (else it waits its WaitCheck)", what, id, p.Woken, err)
	}
}

// The cancel of a chat's waiting head wakes the turn behind it, which is
// parked (in no Asynq queue for that moment): its parking record is marked
// woken, so that its re-enqueue makes it pending.
func TestCancelOfTheWaitingHeadWakesAParkedNext(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ids, _ := lineOf(t, c, "cancel-head", "m1", "m2")
	parkAndDie(t, w, insp, q, ids[1], time.Now())
	res, err := c.Cancel(context.Background(), CancelRequest{TaskID: ids[0]})
	if err != nil || len(res.Turns) != 1 || res.Turns[0].Status != CancelDone {
		t.Fatalf("cancel of the waiting head: %+v, %v", res, err)
	}
	assertWoken(t, w, ids[1], "cancel of the waiting head")
}

// beforeRemoval runs f once, right before the first command that takes
// task out of a line under prefix (whatever command does it).
type beforeRemoval struct {
	line, task string
	f          func()
	fired      atomic.Bool
}

func (h *beforeRemoval) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *beforeRemoval) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *beforeRemoval) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "zrem", "eval", "evalsha":
			var line, task bool
			for _, a := range cmd.Args()[1:] {
				s, _ := a.(string)
				line = line || strings.HasPrefix(s, h.line)
				task = task || s == h.task
			}
			if line && task && h.fired.CompareAndSwap(false, true) {
				h.f()
			}
		}
		return next(ctx, cmd)
	}
}

// A cancel of a waiting turn that races the end of the turn ahead of it:
// the turn ahead leaves the line right before the cancelled one does (it
// was not the head when the cancel looked). The turn behind the cancelled
// one, now the head, is woken.
func TestCancelRacingTheTurnAheadWakesTheNewHead(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	ids, key := lineOf(t, c, "cancel-race", "m1", "m2", "m3")
	lease, err := w.ord.seq.Acquire(ctx, key, ids[0], "w1", nil)
	if err != nil {
		t.Fatal(err)
	}
	parkAndDie(t, w, insp, q, ids[2], time.Now())

	// A client whose line commands go through the hook.
	opt := c.cfg.Redis.(asynq.RedisClientOpt)
	rdb := redis.NewClient(&redis.Options{Addr: opt.Addr, DB: opt.DB})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &beforeRemoval{line: c.cfg.Ordering.Config.Prefix, task: ids[1], f: func() {
		// The turn ahead ends: it leaves the line and wakes the next (the
		// cancelled turn: gone from Asynq already).
		next, err := lease.Release(ctx, true)
		if err != nil {
			t.Error(err)
		}
		if err := w.lines.WakeTask(ctx, q, key, next); err != nil {
			t.Error(err)
		}
	}}
	rdb.AddHook(hook)
	seq, err := ordering.New(rdb, c.cfg.Ordering.Config)
	if err != nil {
		t.Fatal(err)
	}
	ord := c.cfg.Ordering
	ord.Sequencer = seq
	c2, err := NewClient(ClientConfig{Redis: c.cfg.Redis, Queue: q, Ordering: ord, Replies: c.cfg.Replies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c2.Close() })

	res, err := c2.Cancel(ctx, CancelRequest{TaskID: ids[1]})
	if err != nil || len(res.Turns) != 1 || res.Turns[0].Status != CancelDone {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	if !hook.fired.Load() {
		t.Fatal("the turn ahead did not end during the cancel")
	}
	if head, _ := w.ord.seq.Head(ctx, key); head != ids[2] {
		t.Fatalf("head %q, want %s", head, ids[2])
	}
	assertWoken(t, w, ids[2], "cancel racing the turn ahead's end")
}

// A turn that gives up at the head of its line without holding it (its
// acquire failed on its last attempt) leaves the line and wakes the turn
// behind it.
func TestGiveUpWithoutALeaseWakesTheNext(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	ids, key := lineOf(t, c, "giveup", "m1", "m2")
	parkAndDie(t, w, insp, q, ids[1], time.Now())
	info, err := insp.GetTaskInfo(q, ids[0])
	if err != nil {
		t.Fatal(err)
	}
	msg, err := DecodePayload(info.Payload)
	if err != nil {
		t.Fatal(err)
	}
	tt := &attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: ids[0]}, Actx: ctx, Logger: w.log, ID: attempt.ID{TaskID: ids[0], Queue: q, Msg: msg, Task: asynq.NewTask(info.Type, info.Payload), Start: time.Now()}}
	tt.Line = w.lines.Place(line.Attempt{Key: key, TaskID: ids[0], Queue: q, Runner: ids[0], Task: tt.Task, Log: w.log})
	tt.Obs.Observer = w.obs
	attempt.ForTest(tt, false)
	if err := tt.End.GiveUp("could not start: redis down"); !errors.Is(err, asynq.SkipRetry) {
		t.Fatalf("giveUp: %v", err)
	}
	if head, _ := w.ord.seq.Head(ctx, key); head != ids[1] {
		t.Fatalf("head %q, want %s", head, ids[1])
	}
	assertWoken(t, w, ids[1], "give-up of the head")
}

// A cancel by a whole task id cancels that turn or none: not another turn
// whose id begins with it (m17 for m1, which was never enqueued).
func TestCancelByTaskIDMatchesExactly(t *testing.T) {
	c, w, insp, q := parkingEnv(t)
	ctx := context.Background()
	conv := record.Conversation{Integration: "web", ChatID: "exact"}
	r, err := c.Enqueue(ctx, Message{AgentID: "agent-1", Text: "hello m17", Conversation: conv, MessageID: "m17"})
	if err != nil {
		t.Fatal(err)
	}
	ids := []string{r.TaskID}
	rec := &record.TurnRecord{TaskID: r.TaskID, Otid: r.Otid, AgentID: "agent-1", Conversation: conv,
		MessageID: "m17", Queue: q, EnqueuedAt: time.Now().UTC(), Outcome: record.OutcomeRetrying}
	if err := w.journal.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	m1 := strings.TrimSuffix(ids[0], "7")
	for _, cr := range []CancelRequest{{TaskID: m1}, {Otid: m1}, {Otid: r.Otid[:8]}} {
		res, err := c.Cancel(ctx, cr)
		if !errors.Is(err, ErrNotFound) {
			t.Errorf("cancel %+v: %+v, %v; want not found", cr, res, err)
		}
	}
	if info, err := insp.GetTaskInfo(q, ids[0]); err != nil || info.State != asynq.TaskStatePending {
		t.Errorf("m17 after cancels of m1: %+v, %v; want pending, untouched", info, err)
	}
	if _, err := w.lines.Parking().Get(ctx, ids[0]); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("m17: %v", err)
	}
	res, err := c.Cancel(ctx, CancelRequest{Otid: r.Otid})
	if err != nil || len(res.Turns) != 1 || res.Turns[0].TaskID != ids[0] || res.Turns[0].Status != CancelDone {
		t.Errorf("cancel by m17's whole otid: %+v, %v; want m17", res, err)
	}
}
