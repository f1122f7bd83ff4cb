package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// hold is one turn as a worker saw it.
type hold struct {
	key        string
	index      int // place in the join order of its key
	start, end time.Time
}

// raceWorkers runs workers goroutines that pick random unfinished tasks and
// try to Acquire them until every task has run once; each held turn lasts
// work(). It returns the holds in start order and the peak number of
// simultaneous holds (all keys).
func raceWorkers(t *testing.T, s *ordering.Sequencer, tasks map[string][]string, workers int, work func() time.Duration) ([]hold, int) {
	t.Helper()
	ctx := context.Background()
	type item struct {
		key   string
		index int
		id    string
	}
	var (
		mu      sync.Mutex
		pending []item
		holds   []hold
	)
	for key, ids := range tasks {
		for i, id := range ids {
			pending = append(pending, item{key, i, id})
		}
	}
	total := len(pending)
	var inflight, peak, misses, done atomic.Int64
	var wg sync.WaitGroup
	deadline := time.Now().Add(60 * time.Second)
	for w := range workers {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				mu.Lock()
				if len(pending) == 0 {
					mu.Unlock()
					if done.Load() == int64(total) {
						return
					}
					time.Sleep(100 * time.Microsecond)
					continue
				}
				// Like Asynq, a task is delivered to one worker at a
				// time: claim it, put it back when it is not its turn.
				i := rand.IntN(len(pending))
				it := pending[i]
				pending[i] = pending[len(pending)-1]
				pending = pending[:len(pending)-1]
				mu.Unlock()
				l, err := s.Acquire(ctx, it.key, it.id, fmt.Sprint("w", w), nil)
				if ordering.IsNotYourTurn(err) {
					misses.Add(1)
					mu.Lock()
					pending = append(pending, it)
					mu.Unlock()
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				n := inflight.Add(1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				h := hold{key: it.key, index: it.index, start: time.Now()}
				time.Sleep(work())
				h.end = time.Now()
				inflight.Add(-1)
				mu.Lock()
				holds = append(holds, h)
				mu.Unlock()
				if _, err := l.Release(ctx, true); err != nil {
					t.Error(err)
					return
				}
				done.Add(1)
			}
		})
	}
	wg.Wait()
	if len(holds) != total {
		t.Fatalf("%d of %d tasks ran", len(holds), total)
	}
	sort.Slice(holds, func(i, j int) bool { return holds[i].start.Before(holds[j].start) })
	t.Logf("%d turns, %d workers, %d not-your-turn attempts, peak %d simultaneous", total, workers, misses.Load(), peak.Load())
	return holds, int(peak.Load())
}

// checkSerial asserts that, per key, holds start in join order and never
// overlap.
func checkSerial(t testing.TB, holds []hold) {
	t.Helper()
	last := map[string]hold{}
	for _, h := range holds {
		p, seen := last[h.key]
		want := 0
		if seen {
			want = p.index + 1
		}
		if h.index != want {
			t.Fatalf("key %s: task %d started after task %d (want %d)", h.key, h.index, p.index, want)
		}
		if seen && h.start.Before(p.end) {
			t.Fatalf("key %s: task %d started %v before task %d ended", h.key, h.index, p.end.Sub(h.start), p.index)
		}
		last[h.key] = h
	}
}

func realSequencer(t *testing.T, cfg ordering.Config) *ordering.Sequencer {
	t.Helper()
	srv := testredis.RequireReal(t)
	rdb := srv.Client(t)
	cfg.Prefix = "test:ord:" + uuid.NewString()[:8] + ":"
	s, err := ordering.New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cleanup(rdb, cfg.Prefix) })
	return s
}

func TestConcurrentWorkersOneKey(t *testing.T) {
	s := realSequencer(t, ordering.Config{})
	key := ordering.ConversationKey("agent-c", "tg", "1")
	ids := make([]string, 50)
	for i := range ids {
		ids[i] = fmt.Sprintf("t%02d-%s", i, uuid.NewString()[:6])
		if pos, err := s.Join(context.Background(), key, ids[i]); err != nil || pos != i {
			t.Fatalf("Join %d = %d, %v", i, pos, err)
		}
	}
	holds, peak := raceWorkers(t, s, map[string][]string{key: ids}, 8,
		func() time.Duration { return time.Duration(rand.IntN(2000)) * time.Microsecond })
	checkSerial(t, holds)
	if peak != 1 {
		t.Fatalf("peak simultaneous holds on one key = %d", peak)
	}
	if n, _ := s.Len(context.Background(), key); n != 0 {
		t.Fatalf("line has %d left", n)
	}
}

func TestConcurrentKeysRunInParallel(t *testing.T) {
	s := realSequencer(t, ordering.Config{})
	const keys, per = 20, 10
	const turn = 20 * time.Millisecond
	tasks := map[string][]string{}
	for k := range keys {
		key := ordering.ConversationKey("agent-p", "tg", fmt.Sprint(k))
		for i := range per {
			id := fmt.Sprintf("k%d-t%d", k, i)
			if _, err := s.Join(context.Background(), key, id); err != nil {
				t.Fatal(err)
			}
			tasks[key] = append(tasks[key], id)
		}
	}
	start := time.Now()
	holds, peak := raceWorkers(t, s, tasks, 32, func() time.Duration { return turn })
	wall := time.Since(start)
	checkSerial(t, holds)
	serial := time.Duration(keys*per) * turn
	t.Logf("%d keys × %d turns of %v: wall %v, serial would be %v (%.1f× parallel), peak %d keys at once",
		keys, per, turn, wall.Round(time.Millisecond), serial, float64(serial)/float64(wall), peak)
	if peak < 4 {
		t.Fatalf("peak %d simultaneous turns across %d keys: keys do not run in parallel", peak, keys)
	}
	if wall > serial/2 {
		t.Fatalf("wall %v is not well below (1/2 of) serial %v", wall, serial)
	}
}

func TestAcquireContextCancelled(t *testing.T) {
	s := realSequencer(t, ordering.Config{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Acquire(ctx, "k", "a", "w", nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("Acquire(cancelled) = %v", err)
	}
}
