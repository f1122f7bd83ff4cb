package line

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// linesEnv is a worker's Lines without ordering on a queue and key prefix
// of the test's own, and an Asynq client and inspector on the same Redis.
func linesEnv(t *testing.T) (*Lines, *asynq.Client, *asynq.Inspector, string) {
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-line-" + time.Now().Format("150405.000000")
	rdb := srv.Client(t)
	prefix := testkit.Prefix(t, rdb)
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	l := New(Config{Parking: store.Parking{RDB: rdb, Keys: store.Keys{Prefix: prefix}}, Conn: opt, WorkerID: "w1",
		Log: slog.New(slog.DiscardHandler), Recheck: 10 * time.Minute})
	ac := asynq.NewClient(opt)
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() {
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		_ = ac.Close()
		l.Close()
	})
	return l, ac, insp, q
}

// waiting enqueues a turn's task id on q, scheduled ahead (a turn that
// waits for the one ahead of it), and returns its info.
func waiting(t *testing.T, ac *asynq.Client, q, id string, opts ...asynq.Option) *asynq.TaskInfo {
	t.Helper()
	info, err := ac.Enqueue(asynq.NewTask("lettaq:turn", []byte(`{"text":"`+id+`"}`)),
		append([]asynq.Option{asynq.TaskID(id), asynq.Queue(q), asynq.ProcessIn(10 * time.Minute)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return info
}

// parkAndDie does what a worker does when a turn parks, up to the revoke
// (its record written, Asynq's task deleted), and dies there: the
// re-enqueue never happens.
func parkAndDie(t *testing.T, l *Lines, insp *asynq.Inspector, q, id string) store.Parked {
	t.Helper()
	info, err := insp.GetTaskInfo(q, id)
	if err != nil {
		t.Fatal(err)
	}
	p := ParkedOf(info, asynq.NewTask(info.Type, info.Payload), "turn:ahead", "waiting for the turn ahead", "", "w1")
	if err := l.Parking().Park(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if err := insp.DeleteTask(q, id); err != nil { // what RevokeTask does
		t.Fatal(err)
	}
	return p
}

// Unpark (for a cancel) deletes a waiting task, scheduled or parked: a
// parked one is not enqueued again by its re-enqueue; an unknown task is
// not found.
func TestUnparkDropsAWaitingTurn(t *testing.T) {
	l, ac, insp, q := linesEnv(t)
	ctx := context.Background()
	id2, id3 := "turn:web:park-2:m2", "turn:web:park-2:m3"
	waiting(t, ac, q, id2)
	waiting(t, ac, q, id3)
	parkAndDie(t, l, insp, q, id3)
	for _, id := range []string{id2, id3} {
		if found, err := l.Unpark(ctx, q, id); !found || err != nil {
			t.Errorf("unpark %s: %v, %v", id, found, err)
		}
		if _, err := insp.GetTaskInfo(q, id); !errors.Is(err, asynq.ErrTaskNotFound) {
			t.Errorf("%s still in Asynq: %v", id, err)
		}
	}
	// The re-enqueue of the parked one (its worker was not dead, only
	// slow) puts nothing back.
	p, err := l.Parking().Get(ctx, id3)
	if err != nil || !p.Dropped {
		t.Fatalf("the parked turn's record: %+v, %v; want dropped", p, err)
	}
	p.Dropped = false // as the worker's goroutine has it, read before the drop
	if err := l.Enqueue(ctx, p); err != nil {
		t.Fatal(err)
	}
	if _, err := insp.GetTaskInfo(q, id3); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the dropped turn was enqueued again: %v", err)
	}
	if _, err := l.Parking().Get(ctx, id3); !errors.Is(err, store.ErrNotParked) {
		t.Errorf("the dropped turn's record stays: %v", err)
	}
	if found, err := l.Unpark(ctx, q, "turn:nope"); found || err != nil {
		t.Errorf("unknown task: %v, %v", found, err)
	}
}

// A parked task is enqueued again with the retries it had left: Retried 2
// of MaxRetry 5 comes back as Retried 0 of MaxRetry 3, so a turn that used
// retries before it waited does not get them all again; one with none left
// keeps the one TaskMaxRetry keeps for put-backs.
func TestParkedTaskKeepsTheRetriesItHadLeft(t *testing.T) {
	l, ac, insp, q := linesEnv(t)
	ctx := context.Background()
	for i, tc := range []struct{ retried, maxRetry, want int }{{2, 5, 3}, {5, 5, 1}, {0, 26, 26}} {
		id := fmt.Sprint("turn:web:park-r", i, ":m1")
		info := waiting(t, ac, q, id, asynq.MaxRetry(26))
		active := *info // as an attempt that retried sees it
		active.Retried, active.MaxRetry = tc.retried, tc.maxRetry
		p := ParkedOf(&active, asynq.NewTask(info.Type, info.Payload), "turn:ahead", "waiting for the turn ahead", "", "w1")
		if err := l.Parking().Park(ctx, p); err != nil {
			t.Fatal(err)
		}
		if err := insp.DeleteTask(q, id); err != nil { // what RevokeTask does
			t.Fatal(err)
		}
		if err := l.Enqueue(ctx, p); err != nil {
			t.Fatal(err)
		}
		back, err := insp.GetTaskInfo(q, id)
		if err != nil {
			t.Fatal(err)
		}
		if back.MaxRetry != tc.want || back.Retried != 0 || back.State != asynq.TaskStateScheduled {
			t.Errorf("retried %d of %d, parked: back %v with retried %d of %d; want scheduled with 0 of %d",
				tc.retried, tc.maxRetry, back.State, back.Retried, back.MaxRetry, tc.want)
		}
	}
}
