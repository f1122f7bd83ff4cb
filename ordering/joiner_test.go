package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/ordering"
)

// gateHook holds the first round trip that carries a join until open is
// closed, and records every round trip's join count.
type gateHook struct {
	held, open chan struct{}
	once       sync.Once
	// beforeBatch runs before a pipelined round trip of joins.
	beforeBatch func()
	mu          sync.Mutex
	trips       []int // joins per round trip, in order
}

func newGateHook() *gateHook {
	return &gateHook{held: make(chan struct{}), open: make(chan struct{})}
}

func joins(cmds []redis.Cmder) int {
	n := 0
	for _, c := range cmds {
		if a := c.Args(); len(a) > 0 && strings.HasPrefix(strings.ToLower(fmt.Sprint(a[0])), "eval") {
			n++
		}
	}
	return n
}

func (h *gateHook) trip(cmds []redis.Cmder) {
	if n := joins(cmds); n > 0 {
		h.once.Do(func() { close(h.held); <-h.open })
		h.mu.Lock()
		h.trips = append(h.trips, n)
		h.mu.Unlock()
	}
}

func (h *gateHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *gateHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.trip([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}
func (h *gateHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.beforeBatch != nil && joins(cmds) > 1 {
			h.beforeBatch()
		}
		h.trip(cmds)
		return next(ctx, cmds)
	}
}

func (h *gateHook) tripsSoFar() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.trips...)
}

// gatedSequencer is a Sequencer on a client of its own (b's Redis) with h
// on it.
func gatedSequencer(t *testing.T, b backend, s *ordering.Sequencer, h *gateHook) *ordering.Sequencer {
	t.Helper()
	c := redis.NewClient(b.rdb.Options())
	c.AddHook(h)
	t.Cleanup(func() { _ = c.Close() })
	gs, err := ordering.New(c, s.Config())
	if err != nil {
		t.Fatal(err)
	}
	return gs
}

// waitQueued waits until n joins are queued behind the held round trip.
func waitQueued(t *testing.T, s *ordering.Sequencer, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if q, _ := ordering.JoinsState(s); q == n {
			return
		}
		if time.Now().After(deadline) {
			q, _ := ordering.JoinsState(s)
			t.Fatalf("%d joins queued, want %d", q, n)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitIdle waits until no round trip of joins is in flight.
func waitIdle(t *testing.T, s *ordering.Sequencer) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if q, busy := ordering.JoinsState(s); q == 0 && !busy {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("joins still in flight")
		}
		time.Sleep(time.Millisecond)
	}
}

// Joins made while another is in flight go together, in one round trip, and
// each gets its own answer: its place in its own line.
func TestConcurrentJoinsShareARoundTrip(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		// Redis has the script (else the first join is an EVALSHA and an EVAL).
		if _, err := s.Join(ctx, ordering.AgentKey("warm"), "w"); err != nil {
			t.Fatal(err)
		}
		h := newGateHook()
		gs := gatedSequencer(t, b, s, h)
		first := make(chan error, 1)
		go func() {
			_, err := gs.Join(ctx, ordering.AgentKey("first"), "t0")
			first <- err
		}()
		<-h.held
		// 5 conversations of one turn each, and 3 turns of one conversation.
		type res struct {
			id  string
			pos int
			err error
		}
		var wg sync.WaitGroup
		out := make(chan res, 8)
		join := func(key, id string) {
			wg.Add(1)
			go func() {
				defer wg.Done()
				pos, err := gs.Join(ctx, key, id)
				out <- res{id, pos, err}
			}()
		}
		for i := range 5 {
			join(ordering.AgentKey(fmt.Sprintf("alone-%d", i)), fmt.Sprintf("a%d", i))
		}
		for _, id := range []string{"x", "y", "z"} {
			join(ordering.AgentKey("shared"), id)
		}
		waitQueued(t, gs, 8)
		close(h.open)
		wg.Wait()
		close(out)
		if err := <-first; err != nil {
			t.Fatal(err)
		}
		var shared []int
		for r := range out {
			switch {
			case r.err != nil:
				t.Fatalf("join %s: %v", r.id, r.err)
			case strings.HasPrefix(r.id, "a") && r.pos != 0:
				t.Errorf("join %s alone in its line: position %d", r.id, r.pos)
			case !strings.HasPrefix(r.id, "a"):
				shared = append(shared, r.pos)
			}
		}
		sort.Ints(shared)
		if fmt.Sprint(shared) != "[0 1 2]" {
			t.Errorf("positions in the shared line %v, want [0 1 2]", shared)
		}
		if n, err := s.Len(ctx, ordering.AgentKey("shared")); err != nil || n != 3 {
			t.Fatalf("shared line of %d, %v; want 3", n, err)
		}
		if got := h.tripsSoFar(); fmt.Sprint(got) != "[1 8]" {
			t.Errorf("joins per round trip %v, want [1 8]: the first alone, the 8 queued behind it together", got)
		}
		waitIdle(t, gs)
		// Idle again: the next join goes at once, alone.
		if _, err := gs.Join(ctx, ordering.AgentKey("later"), "l"); err != nil {
			t.Fatal(err)
		}
		if got := h.tripsSoFar(); fmt.Sprint(got) != "[1 8 1]" {
			t.Errorf("joins per round trip %v, want [1 8 1]", got)
		}
	})
}

// A queued join whose context ends returns its error at once; the others
// still join, and the batch runs without it waiting.
func TestQueuedJoinCancelled(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		h := newGateHook()
		gs := gatedSequencer(t, b, s, h)
		ctx := context.Background()
		go func() { _, _ = gs.Join(ctx, ordering.AgentKey("first"), "t0") }()
		<-h.held
		cctx, cancel := context.WithCancel(ctx)
		gone := make(chan error, 1)
		go func() {
			_, err := gs.Join(cctx, ordering.AgentKey("gone"), "g")
			gone <- err
		}()
		stays := make(chan error, 1)
		go func() {
			_, err := gs.Join(ctx, ordering.AgentKey("stays"), "s")
			stays <- err
		}()
		waitQueued(t, gs, 2)
		cancel()
		if err := <-gone; !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled join: %v, want context.Canceled", err)
		}
		close(h.open)
		if err := <-stays; err != nil {
			t.Fatal(err)
		}
		if pos, err := s.Position(ctx, ordering.AgentKey("stays"), "s"); err != nil || pos != 0 {
			t.Fatalf("position of the join that stayed: %d, %v", pos, err)
		}
		waitIdle(t, gs)
	})
}

// A Redis that lost the script (restarted) between the first join and the
// batch: the batch's EVALSHAs fail with NOSCRIPT and each is made again.
func TestJoinBatchWithoutTheScript(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		if b.mini == nil {
			t.Skip("no SCRIPT FLUSH on the shared Redis: other packages' tests use it meanwhile")
		}
		h := newGateHook()
		h.beforeBatch = func() {
			if err := b.rdb.ScriptFlush(context.Background()).Err(); err != nil {
				t.Error(err)
			}
		}
		gs := gatedSequencer(t, b, s, h)
		ctx := context.Background()
		go func() { _, _ = gs.Join(ctx, ordering.AgentKey("first"), "t0") }()
		<-h.held
		errs := make(chan error, 3)
		for i := range 3 {
			go func() {
				_, err := gs.Join(ctx, ordering.AgentKey("line"), fmt.Sprintf("n%d", i))
				errs <- err
			}()
		}
		waitQueued(t, gs, 3)
		close(h.open)
		for range 3 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if n, err := s.Len(ctx, ordering.AgentKey("line")); err != nil || n != 3 {
			t.Fatalf("line of %d, %v; want 3", n, err)
		}
		waitIdle(t, gs)
	})
}
