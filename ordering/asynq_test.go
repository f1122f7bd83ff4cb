package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// asynqRun is one run of tasks through a real asynq.Server.
type asynqRun struct {
	ordered      bool
	concurrency  int
	taskCheck    time.Duration
	work         func() time.Duration // the turn's duration
	keyOf        func(i int) string
	n            int
	notYourTurns atomic.Int64
	overlaps     atomic.Int64
	holds        []hold
	wall         time.Duration // from server start to the last turn's end
	queue        string
	seq          *ordering.Sequencer
	insp         *asynq.Inspector
	ids          []string
}

// run enqueues r.n tasks (Enqueue, then Join, as a client should), starts a
// server and waits until every turn has run. Enqueue time is not in r.wall.
func (r *asynqRun) run(tb testing.TB, srv *testredis.Server, rdb *redis.Client, timer interface {
	StartTimer()
	StopTimer()
}) {
	tb.Helper()
	ctx := context.Background()
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	r.queue = "ordtest-" + uuid.NewString()[:8]
	prefix := "test:ord:" + uuid.NewString()[:8] + ":"
	seq, err := ordering.New(rdb, ordering.Config{Prefix: prefix})
	if err != nil {
		tb.Fatal(err)
	}
	r.seq = seq
	r.insp = asynq.NewInspector(opt)
	client := asynq.NewClient(opt)
	defer client.Close()
	tb.Cleanup(func() {
		_ = r.insp.DeleteQueue(r.queue, true)
		_ = r.insp.Close()
		cleanup(rdb, prefix)
	})
	r.ids = make([]string, r.n)
	perKey := map[string]int{}
	for i := range r.n {
		key := r.keyOf(i)
		idx := perKey[key]
		perKey[key]++
		id := fmt.Sprintf("t%05d-%s", i, uuid.NewString()[:6])
		r.ids[i] = id
		payload := key + "\n" + strconv.Itoa(idx)
		if _, err := client.EnqueueContext(ctx, asynq.NewTask("turn", []byte(payload)), asynq.TaskID(id),
			asynq.Queue(r.queue), asynq.MaxRetry(3), asynq.Retention(time.Hour)); err != nil {
			tb.Fatal(err)
		}
		if r.ordered {
			if _, err := seq.Join(ctx, key, id); err != nil {
				tb.Fatal(err)
			}
		}
	}

	var (
		mu       sync.Mutex
		finished = make(chan struct{})
		count    atomic.Int64
		inflight sync.Map // key → *atomic.Int32
	)
	alive := ordering.InspectorAlive(r.insp, r.queue)
	body := func(key string, idx int) {
		v, _ := inflight.LoadOrStore(key, new(atomic.Int32))
		c := v.(*atomic.Int32)
		if c.Add(1) != 1 && r.ordered {
			r.overlaps.Add(1)
		}
		h := hold{key: key, index: idx, start: time.Now()}
		if d := r.work(); d > 0 {
			time.Sleep(d)
		}
		h.end = time.Now()
		c.Add(-1)
		mu.Lock()
		r.holds = append(r.holds, h)
		mu.Unlock()
	}
	handler := asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		key, idxs, _ := strings.Cut(string(t.Payload()), "\n")
		idx, _ := strconv.Atoi(idxs)
		if r.ordered {
			lease, err := seq.Acquire(ctx, key, id, "bench", alive)
			switch {
			case ordering.IsMerged(err), errors.Is(err, ordering.ErrDone):
				return nil
			case ordering.IsNotYourTurn(err):
				r.notYourTurns.Add(1)
				return err
			case err != nil:
				tb.Error(err)
				return err
			}
			body(key, idx)
			next, err := lease.Release(context.WithoutCancel(ctx), true)
			if err != nil {
				tb.Error(err)
			}
			_ = seq.Wake(ctx, r.insp, r.queue, key, next)
		} else {
			body(key, idx)
		}
		if count.Add(1) == int64(r.n) {
			close(finished)
		}
		return nil
	})
	server := asynq.NewServer(opt, asynq.Config{
		Concurrency:              r.concurrency,
		Queues:                   map[string]int{r.queue: 1},
		IsFailure:                ordering.IsFailure,
		RetryDelayFunc:           ordering.RetryDelay,
		TaskCheckInterval:        r.taskCheck,
		DelayedTaskCheckInterval: time.Second,
		ShutdownTimeout:          5 * time.Second,
		LogLevel:                 asynq.FatalLevel,
	})
	if timer != nil {
		timer.StartTimer()
	}
	start := time.Now()
	if err := server.Start(handler); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-finished:
	case <-time.After(time.Duration(r.n)*200*time.Millisecond + 30*time.Second):
		tb.Errorf("only %d of %d turns ran", count.Load(), r.n)
	}
	r.wall = time.Since(start)
	if timer != nil {
		timer.StopTimer()
	}
	server.Shutdown()
	sort.Slice(r.holds, func(i, j int) bool { return r.holds[i].start.Before(r.holds[j].start) })
}

func TestAsynqOneKeyInOrder(t *testing.T) {
	srv := testredis.RequireReal(t)
	rdb := srv.Client(t)
	const n = 30
	key := ordering.ConversationKey("agent-q", "tg", uuid.NewString()[:8])
	r := &asynqRun{ordered: true, concurrency: 10, taskCheck: 20 * time.Millisecond, n: n,
		keyOf: func(int) string { return key },
		work:  func() time.Duration { return time.Duration(rand.IntN(21)) * time.Millisecond }}
	r.run(t, srv, rdb, nil)
	if len(r.holds) != n {
		t.Fatalf("%d of %d turns ran", len(r.holds), n)
	}
	checkSerial(t, r.holds)
	if r.overlaps.Load() != 0 {
		t.Fatalf("%d overlapping turns", r.overlaps.Load())
	}
	for _, id := range r.ids {
		info, err := r.insp.GetTaskInfo(r.queue, id)
		if err != nil {
			t.Fatal(err)
		}
		if info.State != asynq.TaskStateCompleted || info.Retried != 0 {
			t.Fatalf("task %s: state %v, retried %d (NotYourTurn must not count as a retry)", id, info.State, info.Retried)
		}
	}
	if l, _ := r.seq.Len(context.Background(), key); l != 0 {
		t.Fatalf("line has %d left", l)
	}
	var work time.Duration
	for _, h := range r.holds {
		work += h.end.Sub(h.start)
	}
	t.Logf("%d turns on one key, concurrency 10: %v total (%v of it in turn bodies, %.1f ms/turn of overhead), %d not-your-turn put-backs",
		n, r.wall.Round(time.Millisecond), work.Round(time.Millisecond),
		float64((r.wall-work).Milliseconds())/n, r.notYourTurns.Load())
}

// BenchmarkOrdering: turns per second through asynq (real Redis,
// concurrency 10, TaskCheckInterval 20ms) with no-op turns, for one hot key,
// 64 keys, and no ordering.
func BenchmarkOrdering(b *testing.B) {
	srv := testredis.RequireReal(b)
	rdb := srv.Client(b)
	noop := func() time.Duration { return 0 }
	cases := []struct {
		name    string
		ordered bool
		keyOf   func(string) func(int) string
	}{
		{"no-ordering", false, func(p string) func(int) string { return func(i int) string { return p + strconv.Itoa(i%64) } }},
		{"many-keys-64", true, func(p string) func(int) string { return func(i int) string { return p + strconv.Itoa(i%64) } }},
		{"hot-key", true, func(p string) func(int) string { return func(int) string { return p } }},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.StopTimer()
			r := &asynqRun{ordered: c.ordered, concurrency: 10, taskCheck: 20 * time.Millisecond, n: b.N,
				keyOf: c.keyOf("bench-" + uuid.NewString()[:8] + "-"), work: noop}
			r.run(b, srv, rdb, b)
			if len(r.holds) != b.N {
				b.Fatalf("%d of %d turns ran", len(r.holds), b.N)
			}
			if c.ordered {
				checkSerial(b, r.holds)
			}
			b.ReportMetric(float64(b.N)/r.wall.Seconds(), "turns/s")
			b.ReportMetric(float64(r.notYourTurns.Load())/float64(b.N), "putbacks/turn")
		})
	}
}

// TestInspectorAliveAndWakeFindOtherQueues: a conversation's tasks may sit
// in different Asynq queues; the dead-head check and Wake find a task in a
// queue other than the one they are given.
func TestInspectorAliveAndWakeFindOtherQueues(t *testing.T) {
	srv := testredis.RequireReal(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	qa, qb := "ordtest-a-"+uuid.NewString()[:8], "ordtest-b-"+uuid.NewString()[:8]
	insp := asynq.NewInspector(opt)
	client := asynq.NewClient(opt)
	t.Cleanup(func() {
		_ = client.Close()
		_ = insp.DeleteQueue(qa, true)
		_ = insp.DeleteQueue(qb, true)
		_ = insp.Close()
	})
	ctx := context.Background()
	// qa exists (it holds a task); the head waits, scheduled, in qb.
	if _, err := client.Enqueue(asynq.NewTask("turn", nil), asynq.TaskID("other"), asynq.Queue(qa)); err != nil {
		t.Fatal(err)
	}
	if _, err := client.Enqueue(asynq.NewTask("turn", nil), asynq.TaskID("head"), asynq.Queue(qb), asynq.ProcessIn(time.Hour)); err != nil {
		t.Fatal(err)
	}
	alive := ordering.InspectorAlive(insp, qa)
	if ok, err := alive(ctx, "head"); err != nil || !ok {
		t.Fatalf("alive(head in %s) from %s = %v, %v; want true", qb, qa, ok, err)
	}
	if ok, err := alive(ctx, "nowhere"); err != nil || ok {
		t.Fatalf("alive(nowhere) = %v, %v; want false", ok, err)
	}
	rdb := srv.Client(t)
	prefix := "test:ord:" + uuid.NewString()[:8] + ":"
	t.Cleanup(func() { cleanup(rdb, prefix) })
	seq := must[*ordering.Sequencer](t)(ordering.New(rdb, ordering.Config{Prefix: prefix}))
	if err := seq.Wake(ctx, insp, qa, ordering.AgentKey("x"), "head"); err != nil {
		t.Fatal(err)
	}
	if info, err := insp.GetTaskInfo(qb, "head"); err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("after Wake from %s: %+v, %v; want pending in %s", qa, info, err, qb)
	}
}
