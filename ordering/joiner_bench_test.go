package ordering_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// tripCounter counts round trips.
type tripCounter struct{ n atomic.Int64 }

func (c *tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }
func (c *tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { c.n.Add(1); return next(ctx, cmd) }
}
func (c *tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { c.n.Add(1); return next(ctx, cmds) }
}

// processCPU is this process's CPU time, user and system.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkConcurrentJoins is many enqueuers joining lines at once (64
// goroutines, each conversation its own line), as Client.Enqueue does:
// the joins batched (Join) against one round trip each (the way Join
// worked before). It reports round trips per join, and the CPU per join
// of this process and of Redis's main thread (INFO cpu: meaningful on a
// Redis that nothing else uses, e.g. REDIS_URL=redis://127.0.0.1:6395/0).
//
//	go test -run '^$' -bench ConcurrentJoins -benchtime 20000x ./ordering/
func BenchmarkConcurrentJoins(b *testing.B) {
	for _, mode := range []string{"batched", "one-round-trip-each"} {
		b.Run(mode, func(b *testing.B) {
			srv := testredis.New(b)
			rdb := srv.Client(b)
			trips := &tripCounter{}
			rdb.AddHook(trips)
			prefix := "benchord:" + uuid.NewString()[:8] + ":"
			s, err := ordering.New(rdb, ordering.Config{Prefix: prefix})
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { cleanup(rdb, prefix) })
			ctx := context.Background()
			join := s.Join
			if mode != "batched" {
				join = func(ctx context.Context, key, id string) (int, error) { return ordering.JoinAlone(ctx, s, key, id) }
			}
			if _, err := join(ctx, ordering.AgentKey("warm"), "w"); err != nil { // the script loaded
				b.Fatal(err)
			}
			var next atomic.Int64
			b.SetParallelism(32) // × GOMAXPROCS goroutines
			t0, c0, r0 := trips.n.Load(), processCPU(), testredis.MainCPU(ctx, rdb)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					i := next.Add(1)
					if _, err := join(ctx, ordering.AgentKey(fmt.Sprintf("c%d", i)), fmt.Sprintf("t%d", i)); err != nil {
						b.Error(err)
						return
					}
				}
			})
			b.StopTimer()
			n := float64(b.N)
			b.ReportMetric(float64(trips.n.Load()-t0)/n, "trips/join")
			b.ReportMetric(float64(processCPU()-c0)/1e3/n, "cpu-µs/join")
			if r1 := testredis.MainCPU(ctx, rdb); r1 > r0 {
				b.ReportMetric((r1-r0)*1e6/n, "redis-cpu-µs/join")
			}
		})
	}
}
