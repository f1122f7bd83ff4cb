package rediscluster

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// load writes and reads keys through a ClusterClient from several
// goroutines until stopped: each SET is repeated until Redis acknowledges
// it (a command go-redis gives up on is not a lost write, only a late one),
// then read back. Every tag-th key carries tag as hash tag, so that a slot
// of the test's choice is written while it moves.
type load struct {
	rc   *redis.ClusterClient
	name string
	tag  string

	stop chan struct{}
	wg   sync.WaitGroup

	mu       sync.Mutex
	acked    map[string]string
	stall    time.Duration // the longest wait for one write to be acknowledged
	lastDone time.Time

	failed  atomic.Int64 // attempts that failed and were repeated
	badRead atomic.Int64 // reads of an acknowledged write that did not return it
}

// startLoad starts workers goroutines, each writing a key every pause.
func startLoad(rc *redis.ClusterClient, name, tag string, workers int, pause time.Duration) *load {
	l := &load{rc: rc, name: name, tag: tag, stop: make(chan struct{}), acked: map[string]string{}}
	for w := range workers {
		l.wg.Add(1)
		go l.run(w, pause)
	}
	return l
}

func (l *load) run(w int, pause time.Duration) {
	defer l.wg.Done()
	ctx := context.Background()
	for i := 0; ; i++ {
		select {
		case <-l.stop:
			return
		default:
		}
		key := fmt.Sprintf("%s:%d:%d", l.name, w, i)
		if l.tag != "" && i%4 == 0 {
			key = l.tag + key
		}
		val := fmt.Sprintf("v%d", i)
		t0 := time.Now()
		for l.rc.Set(ctx, key, val, 0).Err() != nil {
			l.failed.Add(1)
			select {
			case <-l.stop:
				return // never acknowledged: not counted
			case <-time.After(20 * time.Millisecond):
			}
		}
		took := time.Since(t0)
		l.mu.Lock()
		l.acked[key] = val
		l.stall = max(l.stall, took)
		l.lastDone = time.Now()
		l.mu.Unlock()
		for {
			got, err := l.rc.Get(ctx, key).Result()
			if err == nil {
				if got != val {
					l.badRead.Add(1)
				}
				break
			}
			if err == redis.Nil {
				l.badRead.Add(1)
				break
			}
			l.failed.Add(1)
			select {
			case <-l.stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
		time.Sleep(pause)
	}
}

// writes returns how many writes were acknowledged so far.
func (l *load) writes() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acked)
}

// waitWrites waits until n more writes than now were acknowledged.
func (l *load) waitWrites(t *testing.T, n int, within time.Duration) {
	t.Helper()
	want := l.writes() + n
	deadline := time.Now().Add(within)
	for l.writes() < want {
		if time.Now().After(deadline) {
			t.Fatalf("load: %d writes acknowledged, want %d within %v", l.writes(), want, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// finish stops the load and checks, through a fresh client, that every
// acknowledged write reads back: it returns the number of writes.
func (l *load) finish(t *testing.T, seeds []string) int {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	rc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: seeds})
	defer rc.Close()
	ctx := context.Background()
	keys := make([]string, 0, len(l.acked))
	for k := range l.acked {
		keys = append(keys, k)
	}
	cmds := make([]*redis.StringCmd, len(keys))
	if _, err := rc.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	}); err != nil && err != redis.Nil {
		t.Fatalf("reading the load's keys back: %v", err)
	}
	lost := 0
	for i, c := range cmds {
		if got, _ := c.Result(); got != l.acked[keys[i]] {
			if lost < 5 {
				t.Errorf("%s = %q, want %q (acknowledged)", keys[i], got, l.acked[keys[i]])
			}
			lost++
		}
	}
	if lost > 0 {
		t.Errorf("%d of %d acknowledged writes lost", lost, len(keys))
	}
	if n := l.badRead.Load(); n > 0 {
		t.Errorf("%d reads right after an acknowledged write did not return it", n)
	}
	t.Logf("load %s: %d writes acknowledged, 0 lost; %d attempts repeated; longest wait for one write %v",
		l.name, len(keys), l.failed.Load(), l.stall.Round(time.Millisecond))
	return len(keys)
}
