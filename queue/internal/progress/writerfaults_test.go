package progress

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// errRefused is the error of a round trip that could not reach Redis.
var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// A round trip that failed (Redis down) leaves nothing behind: the writes of
// the next round trips, once Redis is back, are reported as they went, not
// with the failed round trip's errors (writer.loop's
// scratch of errors was never cleared, so a worker failed every later write
// with the outage's error, for good).
func TestWriterForgetsAFailedRoundTrip(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		r := NewReplies(b.RDB, RepliesOptions{Prefix: b.Prefix})
		wr := newWriter(b.RDB, r)
		var down atomic.Bool
		down.Store(true)
		wr.Exec = func(ctx context.Context, ops []store.Op) []error {
			if down.Load() {
				errs := make([]error, len(ops))
				for i := range errs {
					errs[i] = errRefused
				}
				return errs
			}
			return store.Run(ctx, b.RDB, ops)
		}
		ctx := context.Background()
		set := func(key string) store.Op {
			return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
				c := p.Set(ctx, b.Prefix+key, "1", time.Minute)
				return c.Err
			}
		}
		// Redis down: eight turns' writes fail.
		var ps []*Queue
		for i := range 8 {
			p := wr.NewQueue(Conversation{Integration: "test", ChatID: fmt.Sprint("down", i)}, func(error) {}, nil)
			ps = append(ps, p)
			p.Push(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
		}
		for i, p := range ps {
			if err := p.Do(ctx, nil, set(fmt.Sprint("down", i)), set(fmt.Sprint("down", i, "b"))); !errors.Is(err, errRefused) {
				t.Fatalf("turn %d while Redis is down: %v", i, err)
			}
		}
		// Redis back: a new turn's writes go through, reported so.
		down.Store(false)
		var failed atomic.Value
		p := wr.NewQueue(Conversation{Integration: "test", ChatID: "up"}, func(err error) { failed.Store(err) }, nil)
		defer p.Close()
		for k := range 3 {
			if err := p.Do(ctx, nil, set(fmt.Sprint("up", k))); err != nil {
				t.Fatalf("round trip %d after Redis came back: %v", k, err)
			}
		}
		pe, err := p.Prepare(ReplyEvent{Type: EventAnswer, TaskID: "tup", Text: "hi"}, r.answeredKey("tup"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.Do(ctx, []*Event{pe}); err != nil || !pe.written {
			t.Fatalf("final event after Redis came back: written %v, %v", pe.written, err)
		}
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("a progress write after Redis came back failed: %v", err)
		}
		for _, p := range ps {
			p.Close()
		}
	})
}

// One turn's bad stream key (WRONGTYPE) fails only that turn's event, in
// whichever order the turns' events share the round trip's script call: the
// other turn's final event is written and reported written (the
// script's error used to go to every event of the call; events
// before it were written but reported failed, events after it never
// written).
func TestWriterAttributesEachEventsError(t *testing.T) {
	for _, badFirst := range []bool{true, false} {
		t.Run(fmt.Sprint("bad-first=", badFirst), func(t *testing.T) {
			testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
				ctx := context.Background()
				gate := make(chan struct{})
				wr, r, trips := gatedWriter(b, gate)
				good := Conversation{Integration: "test", ChatID: "good"}
				bad := Conversation{Integration: "test", ChatID: "bad"}
				if err := b.RDB.Set(ctx, r.Key(bad), "not a stream", time.Minute).Err(); err != nil {
					t.Fatal(err)
				}
				var badErr atomic.Value
				pa := wr.NewQueue(good, func(err error) { t.Errorf("turn a: %v", err) }, nil)
				pb := wr.NewQueue(bad, func(err error) { badErr.Store(err) }, nil)
				defer pa.Close()
				defer pb.Close()
				// A first round trip waits at the gate; both turns' writes
				// then share the next one, in the order they became ready.
				pa.Push(ReplyEvent{Type: EventPhase, TaskID: "a", Phase: PhaseThinking})
				waitTaken(wr, pa)
				final, err := pa.Prepare(ReplyEvent{Type: EventAnswer, TaskID: "a", Text: "answer a"}, r.answeredKey("a"))
				if err != nil {
					t.Fatal(err)
				}
				released := b.Prefix + "released:a"
				release := func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
					return p.Set(ctx, released, "1", time.Minute).Err
				}
				done := make(chan error, 1)
				if badFirst {
					pb.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "b", Text: "b's delta"})
				}
				go func() { done <- pa.Do(ctx, []*Event{final}, release) }()
				waitQueued(wr, pa, final)
				if !badFirst {
					pb.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "b", Text: "b's delta"})
				}
				close(gate)
				if err := <-done; err != nil {
					t.Fatalf("turn a's final event: %v (written %v)", err, final.written)
				}
				if !final.written || final.err != nil {
					t.Errorf("turn a's final event: written %v, err %v", final.written, final.err)
				}
				if got := fmt.Sprint(streamTexts(t, r, good)); got != "[ answer a]" {
					t.Errorf("turn a's stream: %s", got)
				}
				if ok, err := r.Answered(ctx, "a"); err != nil || !ok {
					t.Errorf("turn a answered: %v %v", ok, err)
				}
				pb.Flush(ctx)
				if err, _ := badErr.Load().(error); err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("turn b's failure: %v, want WRONGTYPE", err)
				}
				if n := trips.Load(); n != 2 {
					t.Errorf("%d round trips, want 2", n)
				}
				// The failed event took no seq: b's next event is its first.
				if err := b.RDB.Del(ctx, r.Key(bad)).Err(); err != nil {
					t.Fatal(err)
				}
				next, _ := pb.Prepare(ReplyEvent{Type: EventAnswer, TaskID: "b", Text: "answer b"}, r.answeredKey("b"))
				if err := pb.Do(ctx, []*Event{next}); err != nil || !next.written || next.seq != 1 {
					t.Errorf("turn b's next event: written %v seq %d, %v", next.written, next.seq, err)
				}
			})
		})
	}
}

// After a script flush (a Redis restarted without its scripts), a turn's
// writes keep their order: an op queued after an event runs after the event
// is written, in the same round trip as before (store.Run
// sent the script calls that met NOSCRIPT again as EVAL in a second round
// trip, after the plain commands of the first had run). On a redis-server of
// the test's own (SCRIPT FLUSH would break the shared one's other users) and
// on miniredis.
func TestWriterKeepsOrderAfterScriptFlush(t *testing.T) {
	servers := map[string]*redis.Client{"miniredis": redis.NewClient(&redis.Options{Addr: miniredis.RunT(t).Addr()})}
	if !testing.Short() {
		servers["redis"] = testredis.StartPersistent(t).Client(t)
	}
	for name, rdb := range servers {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			prefix := testkit.Prefix(t, rdb)
			r := NewReplies(rdb, RepliesOptions{Prefix: prefix})
			wr := newWriter(rdb, r)
			var trips atomic.Int64
			exec := wr.Exec
			wr.Exec = func(ctx context.Context, ops []store.Op) []error {
				trips.Add(1)
				return exec(ctx, ops)
			}
			conv := Conversation{Integration: "test", ChatID: "flush"}
			p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
			defer p.Close()
			for batch := range 3 {
				if batch > 0 {
					if err := rdb.ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
				// The turn's event, then a read of its stream, then
				// another event and a read: each read must see the
				// events before it.
				var lens [2]*redis.IntCmd
				op := func(i int) store.Op {
					return func(ctx context.Context, pl redis.Pipeliner, sha bool) func() error {
						lens[i] = pl.XLen(ctx, r.Key(conv))
						return lens[i].Err
					}
				}
				evA, err := p.Prepare(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: fmt.Sprint(batch, "a")}, "")
				if err != nil {
					t.Fatal(err)
				}
				ev, err := p.Prepare(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: fmt.Sprint(batch, "b")}, "")
				if err != nil {
					t.Fatal(err)
				}
				before := trips.Load()
				// [event a] [XLEN] queued (the writer runs once do
				// schedules it), then do's [event b] [XLEN]: one round trip.
				p.wr.mu.Lock()
				p.queue = append(p.queue, item{ev: evA}, item{op: op(0)})
				p.wr.mu.Unlock()
				if err := p.Do(ctx, []*Event{ev}, op(1)); err != nil {
					t.Fatalf("batch %d: %v", batch, err)
				}
				if got, want := fmt.Sprint(lens[0].Val(), lens[1].Val()), fmt.Sprint(2*batch+1, 2*batch+2); got != want {
					t.Errorf("batch %d: the reads after the events saw %s entries, want %s", batch, got, want)
				}
				if n := trips.Load() - before; n != 1 {
					t.Errorf("batch %d: %d writer round trips", batch, n)
				}
			}
			if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[0a 0b 1a 1b 2a 2b]" {
				t.Errorf("stream %s", got)
			}
		})
	}
}

// BenchmarkFollowedScriptLoads: what a turn's last round trip paid for
// keeping its writes in order after a script flush when store.RunFollowed
// sent SCRIPT LOAD of the scripts other ops follow (the events' and the task
// result's) before them (it now sends their first calls as EVAL instead),
// on a Redis that has them, in a pipeline of their own here. On a
// redis-server of the benchmark's own, whose main thread's CPU is reported
// per round trip.
func BenchmarkFollowedScriptLoads(b *testing.B) {
	ctx := context.Background()
	rdb := testredis.StartPersistent(b).Client(b)
	srcs := []string{}
	for _, sha := range []string{store.ReplyEmitMany.Hash(), store.WriteResult.Hash()} {
		src, ok := evalcmd.Source(sha)
		if !ok {
			b.Fatal("not registered")
		}
		srcs = append(srcs, src)
	}
	// The loads, and for comparison as many PINGs (a round trip's own cost).
	for _, v := range []struct {
		name string
		add  func(p redis.Pipeliner, src string)
	}{
		{"script-load", func(p redis.Pipeliner, src string) { p.ScriptLoad(ctx, src) }},
		{"ping", func(p redis.Pipeliner, _ string) { p.Ping(ctx) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			trip := func() {
				p := rdb.Pipeline()
				for _, s := range srcs {
					v.add(p, s)
				}
				if _, err := p.Exec(ctx); err != nil {
					b.Fatal(err)
				}
			}
			trip()
			cpu0 := testredis.MainCPU(ctx, rdb)
			b.ResetTimer()
			for range b.N {
				trip()
			}
			b.StopTimer()
			if cpu1 := testredis.MainCPU(ctx, rdb); cpu1 > cpu0 {
				b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/round-trip")
			}
		})
	}
}
