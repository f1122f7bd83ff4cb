package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

func TestIsFailureAndRetryDelay(t *testing.T) {
	nyt := func(pos int) error {
		return fmt.Errorf("w: %w", &ordering.NotYourTurnError{Key: "k", Position: pos, Head: "h"})
	}
	for _, c := range []struct {
		err  error
		want bool
	}{
		{nil, false}, {nyt(1), false}, {&ordering.MergedError{Into: "h"}, false},
		{ordering.ErrDone, false}, {errors.New("boom"), true}, {context.DeadlineExceeded, true},
	} {
		if got := ordering.IsFailure(c.err); got != c.want {
			t.Errorf("IsFailure(%v) = %v", c.err, got)
		}
	}
	for range 200 {
		if d := ordering.RetryDelay(0, nyt(1), nil); d < ordering.DefaultRetryMin || d > ordering.DefaultRetryMax {
			t.Fatalf("position 1: %v", d)
		}
		if d := ordering.RetryDelay(0, nyt(3), nil); d < 3*ordering.DefaultRetryMin || d > 3*ordering.DefaultRetryMax {
			t.Fatalf("position 3: %v", d)
		}
		if d := ordering.RetryDelay(0, nyt(500), nil); d < 9*time.Second || d > ordering.DefaultRetryCap {
			t.Fatalf("position 500: %v", d)
		}
	}
	if d := ordering.RetryDelay(3, errors.New("boom"), nil); d < time.Second {
		t.Fatalf("fallback delay %v, want asynq's default", d)
	}
	p := ordering.RetryPolicy{Min: 10 * time.Millisecond, Max: 10 * time.Millisecond, Cap: 50 * time.Millisecond,
		Fallback: func(int, error, *asynq.Task) time.Duration { return time.Hour }}.Func()
	if d := p(0, nyt(2), nil); d != 20*time.Millisecond {
		t.Fatalf("policy position 2: %v", d)
	}
	if d := p(0, nyt(100), nil); d > 50*time.Millisecond || d < 45*time.Millisecond {
		t.Fatalf("policy cap: %v", d)
	}
	if d := p(0, errors.New("x"), nil); d != time.Hour {
		t.Fatalf("policy fallback: %v", d)
	}
}

func TestInspectorAliveAndWake(t *testing.T) {
	srv := testredis.New(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	q := "ordalive-" + uuid.NewString()[:8]
	insp := asynq.NewInspector(opt)
	client := asynq.NewClient(opt)
	t.Cleanup(func() { _ = insp.DeleteQueue(q, true); insp.Close(); client.Close() })
	ctx := context.Background()
	enq := func(id string, opts ...asynq.Option) {
		if _, err := client.Enqueue(asynq.NewTask("x", nil), append(opts, asynq.TaskID(id), asynq.Queue(q))...); err != nil {
			t.Fatal(err)
		}
	}
	enq("pending")
	enq("later", asynq.ProcessIn(time.Hour))
	enq("archived")
	if err := insp.ArchiveTask(q, "archived"); err != nil {
		t.Fatal(err)
	}
	alive := ordering.InspectorAlive(insp, q)
	for id, want := range map[string]bool{"pending": true, "later": true, "archived": false, "missing": false} {
		got, err := alive(ctx, id)
		if err != nil || got != want {
			t.Errorf("alive(%s) = %v, %v; want %v", id, got, err, want)
		}
	}
	s, err := ordering.New(srv.Client(t), ordering.Config{Prefix: "test:ord:" + uuid.NewString()[:8] + ":"})
	if err != nil {
		t.Fatal(err)
	}
	// Wake moves a scheduled/retry task to pending, and never revives an
	// archived one.
	for _, id := range []string{"later", "archived", "pending", "missing", ""} {
		if err := s.Wake(ctx, insp, q, "k", id); err != nil {
			t.Fatalf("Wake(%s): %v", id, err)
		}
	}
	for id, want := range map[string]asynq.TaskState{"later": asynq.TaskStatePending, "archived": asynq.TaskStateArchived} {
		info, err := insp.GetTaskInfo(q, id)
		if err != nil || info.State != want {
			t.Fatalf("%s: %v %v, want %v", id, info, err, want)
		}
	}
}
