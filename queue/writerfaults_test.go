package queue

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// errRefused is the error of a round trip that could not reach Redis.
var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")

// A round trip that failed (Redis down) leaves nothing behind: the writes of
// the next round trips, once Redis is back, are reported as they went, not
// with the failed round trip's errors (issue 24, defect 1: writer.loop's
// scratch of errors was never cleared, so a worker failed every later write
// with the outage's error, for good).
func TestWriterForgetsAFailedRoundTrip(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		wr := newWriter(b.rdb, r)
		var down atomic.Bool
		down.Store(true)
		wr.exec = func(ctx context.Context, ops []pipelineOp) []error {
			if down.Load() {
				errs := make([]error, len(ops))
				for i := range errs {
					errs[i] = errRefused
				}
				return errs
			}
			return runOps(ctx, b.rdb, ops)
		}
		ctx := context.Background()
		set := func(key string) pipelineOp {
			return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
				c := p.Set(ctx, b.prefix+key, "1", time.Minute)
				return c.Err
			}
		}
		// Redis down: eight turns' writes fail.
		var ps []*progress
		for i := range 8 {
			p := wr.newProgress(Conversation{Integration: "test", ChatID: fmt.Sprint("down", i)}, func(error) {})
			ps = append(ps, p)
			p.push(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
		}
		for i, p := range ps {
			if err := p.do(ctx, nil, set(fmt.Sprint("down", i)), set(fmt.Sprint("down", i, "b"))); !errors.Is(err, errRefused) {
				t.Fatalf("turn %d while Redis is down: %v", i, err)
			}
		}
		// Redis back: a new turn's writes go through, reported so.
		down.Store(false)
		var failed atomic.Value
		p := wr.newProgress(Conversation{Integration: "test", ChatID: "up"}, func(err error) { failed.Store(err) })
		defer p.close()
		for k := range 3 {
			if err := p.do(ctx, nil, set(fmt.Sprint("up", k))); err != nil {
				t.Fatalf("round trip %d after Redis came back: %v", k, err)
			}
		}
		pe, err := p.prepare(ReplyEvent{Type: EventAnswer, TaskID: "tup", Text: "hi"}, r.answeredKey("tup"))
		if err != nil {
			t.Fatal(err)
		}
		if err := p.do(ctx, []*preparedEvent{pe}); err != nil || !pe.written {
			t.Fatalf("final event after Redis came back: written %v, %v", pe.written, err)
		}
		if err, _ := failed.Load().(error); err != nil {
			t.Fatalf("a progress write after Redis came back failed: %v", err)
		}
		for _, p := range ps {
			p.close()
		}
	})
}
