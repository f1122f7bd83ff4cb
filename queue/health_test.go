package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/record"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/asynqlog"
	"github.com/lettaq/lettaq/queue/internal/health"
	"github.com/lettaq/lettaq/queue/internal/outage"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// capture is a slog handler that keeps its records.
type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func (c *capture) lines(level slog.Level) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, r := range c.recs {
		if r.Level == level {
			out = append(out, r.Message)
		}
	}
	return out
}

// A routine Redis restart logs at warn: Asynq's lines about the outage
// (dequeue, forwarding, server state, lease extension, each repeated) fold
// into one "waiting for Redis" warning per backoff step (500 ms doubling),
// and an outage longer than a task's lease (30 s) is an error, once. Asynq's other errors, and these lines with an error that is not an
// outage, stay errors.
func TestAsynqOutageLinesFold(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &health.Health{Now: func() time.Time { return now }}
	c := &capture{}
	a := asynqlog.New(slog.New(c), nil, h)
	refused := "dial tcp 127.0.0.1:6379: connect: connection refused"
	asynqLines := func(d time.Duration) {
		// What Asynq writes during d of an outage: a dequeue error every
		// 3 s, forwarding every 5 s, server state and leases every 5 s.
		for at := time.Duration(0); at < d; at += 250 * time.Millisecond {
			now = now.Add(250 * time.Millisecond)
			if at%(3*time.Second) == 0 {
				a.Error("Dequeue error: " + refused)
			}
			if at%(5*time.Second) == 0 {
				a.Error("Failed to forward scheduled tasks: " + refused)
				a.Error("Failed to write server state data: UNKNOWN: " + refused)
				a.Error("Failed to extend lease for tasks [a b]: " + refused)
			}
		}
	}
	asynqLines(8 * time.Second) // a routine restart
	if errs := c.lines(slog.LevelError); len(errs) > 0 {
		t.Errorf("an 8 s outage logged errors: %q", errs)
	}
	warns := c.lines(slog.LevelWarn)
	// Lines at 0, 3, 5 and 6 s: warnings at 0, 3 (past 0.5), 5 (past
	// 3+1), and the one at 6 s folded (before 5+2).
	if len(warns) != 3 || warns[0] != "waiting for Redis: Asynq cannot reach it" {
		t.Errorf("an 8 s outage: warnings %q, want 3 of waiting for Redis", warns)
	}
	if err := h.Ready(nil); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Errorf("ready during the outage: %v", err)
	}
	now = now.Add(health.TroubleFor)
	if err := h.Ready(nil); err != nil {
		t.Errorf("ready %v after the outage: %v", health.TroubleFor, err)
	}

	// A long outage (a new one: after outage.Gap): an error once, past
	// the lease.
	now = now.Add(outage.Gap)
	c.recs = nil
	asynqLines(2 * time.Minute)
	if errs := c.lines(slog.LevelError); len(errs) != 1 || !strings.Contains(errs[0], "longer than a task's lease") {
		t.Errorf("a 2 min outage: errors %q, want one about the lease", errs)
	}
	if warns := c.lines(slog.LevelWarn); len(warns) > 9 { // 0, .5, 1.5, 3.5, 7.5, 15.5, 31.5, 61.5, 91.5 s
		t.Errorf("a 2 min outage: %d warnings, want one per backoff step", len(warns))
	}

	// Not an outage: an error as Asynq wrote it.
	c.recs = nil
	a.Error("Failed to forward scheduled tasks: WRONGTYPE Operation against a key holding the wrong kind of value")
	a.Error("recovering from panic")
	if errs := c.lines(slog.LevelError); len(errs) != 2 {
		t.Errorf("other errors: %q", errs)
	}
}

// Ready follows the writer: a round trip that fails as a whole (Redis
// unreachable) makes the worker not ready, naming the error; with no turn
// writing, Ready's own probe through the writer finds Redis back (/readyz
// used to say ready while every write of the worker failed).
func TestReadyFollowsTheWriter(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		w := &Worker{replies: r}
		w.writer = progress.NewWriter(b.rdb, r.st, r.complete)
		w.writer.Tripped = w.health.Tripped
		var down sync.Mutex
		isDown := true
		exec := w.writer.Exec
		w.writer.Exec = func(ctx context.Context, ops []store.Op) []error {
			down.Lock()
			d := isDown
			down.Unlock()
			if d {
				errs := make([]error, len(ops))
				for i := range errs {
					errs[i] = errRefused
				}
				return errs
			}
			return exec(ctx, ops)
		}
		if err := w.Ready(); err != nil {
			t.Fatalf("ready at start: %v", err)
		}
		p := w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "ready"}, func(error) {}, nil)
		defer p.Close()
		if err := p.Do(context.Background(), nil, func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
			return pl.Ping(ctx).Err
		}); !errors.Is(err, errRefused) {
			t.Fatalf("write while down: %v", err)
		}
		if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "connection refused") {
			t.Fatalf("ready while the writes fail: %v", err)
		}
		// Not a Redis outage: a command refused is that op's trouble.
		if err := fmt.Errorf("queue: emit: %w", redis.Nil); progress.IsOutage(err) {
			t.Errorf("%v taken for an outage", err)
		}
		down.Lock()
		isDown = false
		down.Unlock()
		w.health.Tripped(errRefused)
		deadline := time.Now().Add(10 * time.Second)
		for w.Ready() != nil {
			if time.Now().After(deadline) {
				t.Fatalf("still not ready 10 s after Redis came back: %v", w.Ready())
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
}

// A full Redis (maxmemory reached under noeviction) answers PING but
// refuses every write with OOM: the worker is not ready while its writes
// are refused, its own probe (a write, not a PING) does not take it for
// ready while Redis stays full, and it is ready again by itself once memory
// is freed. Asynq's lines about OOM count as Redis trouble too.
func TestReadyWhenRedisIsFull(t *testing.T) {
	rs := testredis.StartPersistent(t)
	rdb := rs.Client(t)
	prefix := "lettaqtest:" + uuid.NewString() + ":"
	r := NewReplies(rdb, RepliesOptions{Prefix: prefix})
	w := &Worker{replies: r, cfg: WorkerConfig{WorkerID: "w1"}}
	w.writer = progress.NewWriter(rdb, r.st, r.complete)
	w.writer.Tripped = w.health.Tripped
	ctx := context.Background()
	free, err := testredis.Fill(ctx, rdb, prefix)
	if err != nil {
		t.Fatal(err)
	}
	p := w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "full"}, func(error) {}, nil)
	defer p.Close()
	werr := p.Do(ctx, nil, func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
		return pl.Set(ctx, prefix+"x", "y", time.Minute).Err
	})
	if !redis.HasErrorPrefix(werr, "OOM") {
		t.Fatalf("write while full: %v", werr)
	}
	if err := w.Ready(); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("ready while the writes are refused: %v", err)
	}
	// Ready's probe runs (at most every health.ProbeEvery): Redis still full, the
	// worker stays not ready.
	deadline := time.Now().Add(3 * health.ProbeEvery)
	for time.Now().Before(deadline) {
		if err := w.Ready(); err == nil {
			t.Fatal("ready while Redis is still full (the probe took a PING for a write?)")
		}
		time.Sleep(50 * time.Millisecond)
	}
	oom := "Dequeue error: OOM command not allowed when used memory > 'maxmemory'."
	if !outage.IsAsynqLine(oom) {
		t.Error("Asynq's dequeue error on a full Redis not taken for Redis trouble")
	}
	c := &capture{}
	var o outage.Log
	o.Line(slog.New(c), oom, time.Now())
	if warns := c.lines(slog.LevelWarn); len(warns) != 1 || !strings.Contains(warns[0], "full") {
		t.Errorf("Asynq's line on a full Redis logged %q, want it to say Redis is full", warns)
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(10 * time.Second)
	for w.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("still not ready 10 s after memory was freed: %v", w.Ready())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ttl := rdb.TTL(ctx, prefix+"ready:w1").Val(); ttl <= 0 || ttl > 10*time.Second {
		t.Errorf("the probe's key has TTL %v, want a few seconds", ttl)
	}
}

// errRefused is the error of a round trip that could not reach Redis.
var errRefused = errors.New("dial tcp 127.0.0.1:1: connect: connection refused")
