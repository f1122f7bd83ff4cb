package line

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// TestWakeTriedAgainAfterRedisFailed: a wake-up that fails because Redis
// does not answer (it is stopped) is tried again in the background, and
// the waiting turn runs once Redis answers again, not at its wait check.
func TestWakeTriedAgainAfterRedisFailed(t *testing.T) {
	srv := testredis.StartPersistent(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr}
	l := New(Config{Parking: store.Parking{RDB: srv.Client(t), Keys: store.Keys{Prefix: "lettaq-unit-rewake:"}}, Conn: opt,
		WorkerID: "w1", Log: slog.New(slog.DiscardHandler), Recheck: 10 * time.Minute})
	ac := asynq.NewClient(opt)
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() {
		_ = insp.Close()
		_ = ac.Close()
		l.Close()
	})
	const q = "lettaq-unit-rewake"
	waiting(t, ac, q, "turn-2")

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	l.Wake(ctx, nil, "the next turn", q, "", "turn-2")
	cancel()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	l.Drain(30 * time.Second) // the wake-up tried again
	info, err := insp.GetTaskInfo(q, "turn-2")
	if err != nil {
		t.Fatal(err)
	}
	if info.State != asynq.TaskStatePending {
		t.Errorf("the waiting turn is %s once Redis answers again, want pending (woken)", info.State)
	}
}
