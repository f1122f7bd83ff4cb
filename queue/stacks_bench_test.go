package queue

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
)

// BenchmarkWaitingTaskStacks measures the goroutine stacks of Asynq tasks
// whose handlers grew their stacks (as a turn's does on its way to its
// send) and then wait shallow (as a turn whose stream waits for the agent
// does: see processTask): per task, after three GCs.
// With a cancelable BaseContext every task's context registers in that one
// context from Asynq's goroutine that waits for the handler, which grows
// that goroutine to 4 KiB (see service.Stops): the worker gives Asynq none.
//
//	go test -run '^$' -bench WaitingTaskStacks -benchtime 1x ./queue/
func BenchmarkWaitingTaskStacks(b *testing.B) {
	srv := testredis.New(b)
	if !srv.Real {
		b.Skip("needs a real Redis (Asynq's scripts)")
	}
	for _, base := range []string{"none", "cancelable"} {
		b.Run("base="+base, func(b *testing.B) {
			for range b.N {
				b.ReportMetric(waitingTaskStacks(b, srv, base == "cancelable", 2000), "stack-B/task")
			}
		})
	}
}

func waitingTaskStacks(b *testing.B, srv *testredis.Server, cancelable bool, n int) float64 {
	q := "lettaqbench-stacks-" + uuid.NewString()
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	cfg := asynq.Config{Concurrency: n, Queues: map[string]int{q: 1}, LogLevel: asynq.FatalLevel, TaskCheckInterval: 10 * time.Millisecond}
	if cancelable {
		ctx, cancel := context.WithCancelCause(context.Background())
		defer cancel(nil)
		cfg.BaseContext = func() context.Context { return ctx }
	}
	release, started := make(chan struct{}), make(chan struct{}, n)
	mux := asynq.NewServeMux()
	mux.HandleFunc("t", func(ctx context.Context, _ *asynq.Task) error {
		growStackBy(40)
		started <- struct{}{}
		<-release
		return nil
	})
	cl := asynq.NewClient(opt)
	defer cl.Close()
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	defer func() { _ = insp.DeleteQueue(q, true) }()
	for range n {
		if _, err := cl.Enqueue(asynq.NewTask("t", nil), asynq.Queue(q), asynq.Retention(0)); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	s := asynq.NewServer(opt, cfg)
	if err := s.Start(mux); err != nil {
		b.Fatal(err)
	}
	defer s.Shutdown()
	defer close(release)
	for range n {
		select {
		case <-started:
		case <-time.After(30 * time.Second):
			b.Fatal("tasks did not start")
		}
	}
	time.Sleep(100 * time.Millisecond) // let the last handlers reach their wait
	runtime.GC()
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&after)
	return float64(after.StackInuse-before.StackInuse) / float64(n)
}

// growStackBy uses about 300 bytes of stack per level, then returns.
//
//go:noinline
func growStackBy(n int) int {
	var buf [256]byte
	buf[n%256] = byte(n)
	if n == 0 {
		return int(buf[0])
	}
	return growStackBy(n-1) + int(buf[n%256])
}
