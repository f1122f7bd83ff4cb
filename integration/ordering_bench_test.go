package integration

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// finishCounter counts finished turns and closes done at want.
type finishCounter struct {
	queue.NopObserver
	n    atomic.Int64
	want int64
	done chan struct{}
}

func (f *finishCounter) TurnFinished(string, string, time.Duration, time.Duration) {
	if f.n.Add(1) == f.want {
		close(f.done)
	}
}

// BenchmarkOrderingOverhead measures no-op turns through a real worker
// (in-process, concurrency 50, Redis, lettasim) with ordering off and on,
// for one hot conversation and for one conversation per turn. All b.N
// turns are enqueued first; the clock runs from the worker's start to the
// last finished turn.
//
//	go test -run '^$' -bench OrderingOverhead -benchtime 300x ./integration/
func BenchmarkOrderingOverhead(b *testing.B) {
	for _, tc := range []struct {
		name     string
		off, hot bool
	}{
		{"off/many-keys", true, false},
		{"off/hot-key", true, true},
		{"on/many-keys", false, false},
		{"on/hot-key", false, true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			e := newEnv(b)
			ord := e.ordering()
			ord.Off = tc.off
			client, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
				Retention: time.Hour, Replies: e.replies, Ordering: ord})
			if err != nil {
				b.Fatal(err)
			}
			defer client.Close()
			agent := e.sim.CreateAgent("bench", nil)
			hot := e.conv("hot")
			for i := range b.N {
				c := hot
				if !tc.hot {
					c = record.Conversation{Integration: "test", ChatID: fmt.Sprintf("k%d-%s", i, randHex(3))}
				}
				if _, err := client.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: c,
					MessageID: fmt.Sprint(i), Text: "noop"}); err != nil {
					b.Fatal(err)
				}
			}
			obs := &finishCounter{want: int64(b.N), done: make(chan struct{})}
			b.ResetTimer()
			t0 := time.Now()
			e.startWorker("bench", func(c *queue.WorkerConfig) {
				c.Observer = obs
				c.Ordering.Off = tc.off
			})
			select {
			case <-obs.done:
			case <-time.After(5 * time.Minute):
				b.Fatalf("%d of %d turns finished", obs.n.Load(), b.N)
			}
			took := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/took.Seconds(), "turns/s")
		})
	}
}
