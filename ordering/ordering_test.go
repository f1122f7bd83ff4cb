package ordering_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// backend is one Redis a test runs against.
type backend struct {
	name string
	rdb  *redis.Client
	mini *miniredis.Miniredis // nil on real Redis
}

// backends returns the real Redis (when reachable) and a miniredis. The
// goroutine leak check runs after both are closed.
func backends(t *testing.T) []backend {
	t.Helper()
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	var out []backend
	if s, ok := testredis.Real(t); ok {
		out = append(out, backend{name: "real", rdb: s.Client(t)})
	}
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	out = append(out, backend{name: "mini", rdb: c, mini: m})
	return out
}

// eachBackend runs f on every backend with a fresh Sequencer whose prefix is
// unique to the test.
func eachBackend(t *testing.T, cfg ordering.Config, f func(t *testing.T, b backend, s *ordering.Sequencer)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			c := cfg
			c.Prefix = "test:ord:" + uuid.NewString()[:8] + ":"
			s, err := ordering.New(b.rdb, c)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { cleanup(b.rdb, c.Prefix) })
			f(t, b, s)
		})
	}
}

func cleanup(rdb redis.UniversalClient, prefix string) {
	ctx := context.Background()
	iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}

func must[T any](t testing.TB) func(v T, err error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func joinAll(t testing.TB, s *ordering.Sequencer, key string, ids ...string) {
	t.Helper()
	for _, id := range ids {
		_, err := s.Join(context.Background(), key, id)
		if err != nil {
			t.Fatal(err)
		}
	}
}

func wantNYT(t *testing.T, err error, pos int, head string, held bool) {
	t.Helper()
	var nyt *ordering.NotYourTurnError
	if !errors.As(err, &nyt) {
		t.Fatalf("err = %v, want *NotYourTurnError", err)
	}
	if nyt.Position != pos || nyt.Head != head || nyt.HeadHeld != held {
		t.Fatalf("NotYourTurn = %+v, want position %d head %s held %v", *nyt, pos, head, held)
	}
	if !ordering.IsNotYourTurn(fmt.Errorf("wrapped: %w", err)) {
		t.Fatal("IsNotYourTurn(wrapped) = false")
	}
}

func TestJoinOrderAndIdempotence(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.ConversationKey("agent-1", "tg", "42")
		for i, id := range []string{"a", "b", "c"} {
			if pos := must[int](t)(s.Join(ctx, key, id)); pos != i {
				t.Fatalf("Join(%s) = %d, want %d", id, pos, i)
			}
		}
		// A duplicate keeps its place.
		if pos := must[int](t)(s.Join(ctx, key, "a")); pos != 0 {
			t.Fatalf("Join(a) again = %d, want 0", pos)
		}
		if pos := must[int](t)(s.Join(ctx, key, "b")); pos != 1 {
			t.Fatalf("Join(b) again = %d, want 1", pos)
		}
		if n := must[int](t)(s.Len(ctx, key)); n != 3 {
			t.Fatalf("Len = %d", n)
		}
		if h := must[string](t)(s.Head(ctx, key)); h != "a" {
			t.Fatalf("Head = %q", h)
		}
		if p := must[int](t)(s.Position(ctx, key, "c")); p != 2 {
			t.Fatalf("Position(c) = %d", p)
		}
		if p := must[int](t)(s.Position(ctx, key, "zz")); p != -1 {
			t.Fatalf("Position(zz) = %d", p)
		}
		// Many joins within one millisecond still keep their order.
		key2 := ordering.ConversationKey("agent-1", "tg", "43")
		for i := range 200 {
			if pos := must[int](t)(s.Join(ctx, key2, fmt.Sprint("t", i))); pos != i {
				t.Fatalf("Join(t%d) = %d", i, pos)
			}
		}
		if err := s.Remove(ctx, key, "a"); err != nil {
			t.Fatal(err)
		}
		if h := must[string](t)(s.Head(ctx, key)); h != "b" {
			t.Fatalf("Head after Remove = %q", h)
		}
		if _, err := s.Join(ctx, "bad{key}", "x"); !errors.Is(err, ordering.ErrInvalidKey) {
			t.Fatalf("Join(bad key) = %v", err)
		}
	})
}

func TestAcquireOnlyHeadAndExclusive(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-2")
		joinAll(t, s, key, "a", "b", "c")

		_, err := s.Acquire(ctx, key, "b", "w1", nil)
		wantNYT(t, err, 1, "a", false)
		_, err = s.Acquire(ctx, key, "c", "w1", nil)
		wantNYT(t, err, 2, "a", false)

		la, err := s.Acquire(ctx, key, "a", "w1", nil)
		if err != nil {
			t.Fatal(err)
		}
		if task, holder := must2(t)(s.Holder(ctx, key)); task != "a" || holder != "w1" {
			t.Fatalf("Holder = %s %s", task, holder)
		}
		_, err = s.Acquire(ctx, key, "b", "w2", nil)
		wantNYT(t, err, 1, "a", true)

		// Release(!done): a keeps its place; b still waits.
		next, err := la.Release(ctx, false)
		if err != nil || next != "a" {
			t.Fatalf("Release(!done) = %q, %v; want a", next, err)
		}
		_, err = s.Acquire(ctx, key, "b", "w2", nil)
		wantNYT(t, err, 1, "a", false)

		// The retried attempt of a runs again, then finishes.
		la, err = s.Acquire(ctx, key, "a", "w3", nil)
		if err != nil {
			t.Fatal(err)
		}
		next, err = la.Release(ctx, true)
		if err != nil || next != "b" {
			t.Fatalf("Release(done) = %q, %v; want b", next, err)
		}
		// Idempotent.
		if next, err = la.Release(ctx, true); err != nil || next != "b" {
			t.Fatalf("Release again = %q, %v", next, err)
		}
		if p := must[int](t)(s.Position(ctx, key, "a")); p != -1 {
			t.Fatalf("a still in line at %d", p)
		}
		lb, err := s.Acquire(ctx, key, "b", "w2", nil)
		if err != nil {
			t.Fatal(err)
		}
		if next, _ := lb.Release(ctx, true); next != "c" {
			t.Fatalf("next = %q", next)
		}
		lc := must[*ordering.Lease](t)(s.Acquire(ctx, key, "c", "w2", nil))
		if next, _ := lc.Release(ctx, true); next != "" {
			t.Fatalf("next = %q, want empty", next)
		}
		if n := must[int](t)(s.Len(ctx, key)); n != 0 {
			t.Fatalf("Len = %d", n)
		}
		// A duplicate delivery of a finished task does not run again, and
		// a late Join does not put it back in the line.
		if _, err := s.Acquire(ctx, key, "a", "w", nil); !errors.Is(err, ordering.ErrDone) || ordering.IsFailure(err) {
			t.Fatalf("Acquire(finished) = %v", err)
		}
		if pos := must[int](t)(s.Join(ctx, key, "b")); pos != -1 {
			t.Fatalf("Join(finished) = %d, want -1", pos)
		}
		if n := must[int](t)(s.Len(ctx, key)); n != 0 {
			t.Fatalf("Len = %d", n)
		}
	})
}

// TestJoinAddedSaysWhoAdded: JoinAdded reports added only for the call
// that put the task in the line: a duplicate's join, a finished task's and
// a batched join (queued behind one in flight) say so too.
func TestJoinAddedSaysWhoAdded(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.ConversationKey("agent-1", "tg", "added")
		for _, tc := range []struct {
			id    string
			pos   int
			added bool
		}{{"a", 0, true}, {"b", 1, true}, {"a", 0, false}, {"b", 1, false}} {
			pos, added, err := s.JoinAdded(ctx, key, tc.id)
			if err != nil || pos != tc.pos || added != tc.added {
				t.Fatalf("JoinAdded(%s) = %d, %v, %v; want %d, %v", tc.id, pos, added, err, tc.pos, tc.added)
			}
		}
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w", nil))
		if _, err := l.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
		if pos, added, err := s.JoinAdded(ctx, key, "a"); err != nil || pos != -1 || added {
			t.Fatalf("JoinAdded(finished) = %d, %v, %v; want -1, false", pos, added, err)
		}
		// Concurrent joins go in batches: each still learns its own.
		var wg sync.WaitGroup
		got := make([]bool, 20)
		for i := range got {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, got[i], _ = s.JoinAdded(ctx, key, fmt.Sprintf("c%d", i%10))
			}()
		}
		wg.Wait()
		n := 0
		for _, a := range got {
			if a {
				n++
			}
		}
		if n != 10 {
			t.Fatalf("%d of 20 concurrent joins of 10 ids said added, want 10", n)
		}
	})
}

func must2(t testing.TB) func(a, b string, err error) (string, string) {
	return func(a, b string, err error) (string, string) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

func TestReacquireBySameTaskTakesOver(t *testing.T) {
	eachBackend(t, ordering.Config{Lease: 300 * time.Millisecond}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-3")
		joinAll(t, s, key, "a", "b")
		old := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w-dead", nil))
		// A recovered attempt of a (its first worker presumed dead).
		cur := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w-new", nil))
		select {
		case <-old.Lost():
		case <-time.After(2 * time.Second):
			t.Fatal("the older lease did not report Lost after the takeover")
		}
		// The old attempt's release does not free the new attempt's lock.
		if _, err := old.Release(ctx, false); err != nil {
			t.Fatal(err)
		}
		if task, holder := must2(t)(s.Holder(ctx, key)); task != "a" || holder != "w-new" {
			t.Fatalf("Holder = %s %s", task, holder)
		}
		_, err := s.Acquire(ctx, key, "b", "w", nil)
		wantNYT(t, err, 1, "a", true)
		if next, _ := cur.Release(ctx, true); next != "b" {
			t.Fatalf("next = %q", next)
		}
	})
}

func TestLeaseExpiryFreesLock(t *testing.T) {
	const lease = 200 * time.Millisecond
	eachBackend(t, ordering.Config{Lease: lease, DeadHeadGrace: -1}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-4")
		joinAll(t, s, key, "a", "b")
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w", nil))
		// The lock lives at most one lease between renewals.
		ttl := b.rdb.PTTL(ctx, lockKey(s, key)).Val()
		if ttl <= 0 || ttl > lease {
			t.Fatalf("lock TTL = %v, want (0, %v]", ttl, lease)
		}
		// A killed worker: its lock is there, nobody renews it.
		l.Release(ctx, false)
		b.rdb.HSet(ctx, lockKey(s, key), "task", "a", "token", "dead", "holder", "killed")
		b.rdb.PExpire(ctx, lockKey(s, key), lease)
		_, err := s.Acquire(ctx, key, "b", "w", nil)
		wantNYT(t, err, 1, "a", true)
		if b.mini != nil {
			b.mini.FastForward(lease + time.Millisecond)
		} else {
			time.Sleep(lease + 50*time.Millisecond)
		}
		task, _ := must2(t)(s.Holder(ctx, key))
		if task != "" {
			t.Fatalf("lock still held by %q after the lease", task)
		}
		// The killed task stays head (order holds): b still waits, a
		// re-acquires when Asynq recovers it.
		_, err = s.Acquire(ctx, key, "b", "w", nil)
		wantNYT(t, err, 1, "a", false)
		la := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w-recovered", nil))
		if next, _ := la.Release(ctx, true); next != "b" {
			t.Fatalf("next = %q", next)
		}
	})
}

func lockKey(s *ordering.Sequencer, key string) string {
	return s.Config().Prefix + "lock:{" + key + "}"
}

func TestRenewalKeepsLeaseAlive(t *testing.T) {
	const lease = 150 * time.Millisecond
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-5")
		joinAll(t, s, key, "a", "b")
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w", nil))
		deadline := time.Now().Add(5 * lease)
		for time.Now().Before(deadline) {
			if b.mini != nil {
				// miniredis expires keys only when told: advance its
				// clock by what really passed.
				b.mini.FastForward(20 * time.Millisecond)
			}
			time.Sleep(20 * time.Millisecond)
			task, _ := must2(t)(s.Holder(ctx, key))
			if task != "a" {
				t.Fatalf("lock lost after %v of renewal", time.Until(deadline))
			}
			select {
			case <-l.Lost():
				t.Fatal("Lost fired while renewing")
			default:
			}
		}
		_, err := s.Acquire(ctx, key, "b", "w", nil)
		wantNYT(t, err, 1, "a", true)
		if _, err := l.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
	})
}

func TestLostFiresWhenStolenOrExpired(t *testing.T) {
	const lease = 150 * time.Millisecond
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-6")
		joinAll(t, s, key, "a")
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w", nil))
		lctx, cancel := l.Context(ctx)
		defer cancel()
		// A context given up before the loss ends with its own cancel.
		early, cancelEarly := l.Context(ctx)
		cancelEarly()
		// AfterLost: a function still registered is called once at the
		// loss; one stopped before is not.
		var called, stoppedCalled atomic.Int32
		calledCh := make(chan struct{})
		stop := l.AfterLost(func() {
			if called.Add(1) == 1 {
				close(calledCh)
			}
		})
		stopEarly := l.AfterLost(func() { stoppedCalled.Add(1) })
		if !stopEarly() {
			t.Fatal("stop of a registered function reported false")
		}
		if err := l.Err(); err != nil {
			t.Fatalf("Err before the loss = %v", err)
		}
		// Someone else's lock (e.g. ours expired and another took it).
		b.rdb.HSet(ctx, lockKey(s, key), "token", "someone-else")
		select {
		case <-l.Lost():
		case <-time.After(5 * lease):
			t.Fatal("Lost did not fire")
		}
		select { // Lost closes before the functions are called
		case <-calledCh:
		case <-time.After(5 * time.Second):
			t.Fatal("AfterLost's function was not called at the loss")
		}
		if n := called.Load(); n != 1 {
			t.Fatalf("AfterLost's function called %d times at the loss, want 1", n)
		}
		if stop() {
			t.Fatal("stop after the call reported true")
		}
		if n := stoppedCalled.Load(); n != 0 {
			t.Fatalf("a stopped AfterLost function was called %d times", n)
		}
		if err := l.Err(); !errors.Is(err, ordering.ErrLeaseLost) {
			t.Fatalf("Err after the loss = %v", err)
		}
		// Registered after the loss: called at once.
		var lateCalled bool
		l.AfterLost(func() { lateCalled = true })
		if !lateCalled {
			t.Fatal("AfterLost after the loss did not call its function at once")
		}
		<-lctx.Done()
		if !errors.Is(context.Cause(lctx), ordering.ErrLeaseLost) {
			t.Fatalf("cause = %v", context.Cause(lctx))
		}
		if c := context.Cause(early); !errors.Is(c, context.Canceled) {
			t.Fatalf("a context cancelled before the loss: cause = %v", c)
		}
		// Taken after the loss: ended at once, and Lost stays closed.
		late, cancelLate := l.Context(ctx)
		defer cancelLate()
		if !errors.Is(context.Cause(late), ordering.ErrLeaseLost) {
			t.Fatalf("a context taken after the loss: cause = %v", context.Cause(late))
		}
		select {
		case <-l.Lost():
		default:
			t.Fatal("Lost open again")
		}
		l.Release(ctx, false)

		// Expired: the lock vanished.
		l2 := must[*ordering.Lease](t)(s.Acquire(ctx, ordering.AgentKey("agent-6b"), "x", "w", nil))
		b.rdb.Del(ctx, lockKey(s, ordering.AgentKey("agent-6b")))
		select {
		case <-l2.Lost():
		case <-time.After(5 * lease):
			t.Fatal("Lost did not fire after expiry")
		}
		l2.Release(ctx, true)
	})
}

func TestDeadHeadSkipping(t *testing.T) {
	eachBackend(t, ordering.Config{DeadHeadGrace: -1}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-7")
		joinAll(t, s, key, "dead1", "dead2", "live", "me")
		var asked []string
		alive := func(_ context.Context, id string) (bool, error) {
			asked = append(asked, id)
			return id == "live" || id == "me", nil
		}
		_, err := s.Acquire(ctx, key, "me", "w", alive)
		wantNYT(t, err, 1, "live", false)
		if fmt.Sprint(asked) != "[dead1 dead2 live]" {
			t.Fatalf("asked %v", asked)
		}
		// A held lock means the head is running: alive is not asked.
		asked = nil
		ll := must[*ordering.Lease](t)(s.Acquire(ctx, key, "live", "w", alive))
		_, err = s.Acquire(ctx, key, "me", "w", alive)
		wantNYT(t, err, 1, "live", true)
		if len(asked) != 0 {
			t.Fatalf("asked %v while the head runs", asked)
		}
		// A head that fails its alive check with an error is kept.
		ll.Release(ctx, false)
		_, err = s.Acquire(ctx, key, "me", "w", func(context.Context, string) (bool, error) {
			return false, errors.New("inspector down")
		})
		wantNYT(t, err, 1, "live", false)
		// Finally the live head ends; me runs.
		ll.Release(ctx, true)
		lm := must[*ordering.Lease](t)(s.Acquire(ctx, key, "me", "w", alive))
		lm.Release(ctx, true)
	})
}

func TestDeadHeadGrace(t *testing.T) {
	now := time.Now()
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	eachBackend(t, ordering.Config{DeadHeadGrace: time.Minute, Now: clock}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-8")
		joinAll(t, s, key, "joined-before-enqueue", "me")
		dead := func(context.Context, string) (bool, error) { return false, nil }
		_, err := s.Acquire(ctx, key, "me", "w", dead)
		wantNYT(t, err, 1, "joined-before-enqueue", false)
		mu.Lock()
		now = now.Add(2 * time.Minute)
		mu.Unlock()
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "me", "w", dead))
		l.Release(ctx, true)
		mu.Lock()
		now = now.Add(-2 * time.Minute)
		mu.Unlock()
	})
}

func TestAutoJoinAndNoAutoJoin(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-9")
		joinAll(t, s, key, "a")
		// Enqueued before ordering was enabled: joins at the tail.
		_, err := s.Acquire(ctx, key, "legacy", "w", nil)
		wantNYT(t, err, 1, "a", false)
		if p := must[int](t)(s.Position(ctx, key, "legacy")); p != 1 {
			t.Fatalf("legacy at %d", p)
		}
		// Alone on a key: runs at once.
		l := must[*ordering.Lease](t)(s.Acquire(ctx, ordering.AgentKey("agent-9b"), "solo", "w", nil))
		l.Release(ctx, true)

		strict := must[*ordering.Sequencer](t)(ordering.New(b.rdb, ordering.Config{Prefix: s.Config().Prefix, NoAutoJoin: true}))
		if _, err := strict.Acquire(ctx, key, "other", "w", nil); !errors.Is(err, ordering.ErrNotJoined) {
			t.Fatalf("NoAutoJoin: %v", err)
		}
	})
}

func TestCoalescing(t *testing.T) {
	eachBackend(t, ordering.Config{MergedTTL: time.Hour}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.ConversationKey("agent-10", "slack", "C1")
		joinAll(t, s, key, "h", "f1", "f2", "f3", "f4")
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "h", "w", nil))
		if _, err := s.TakeFollowers(ctx, key, "f1", 2); !errors.Is(err, ordering.ErrNotHead) {
			t.Fatalf("TakeFollowers(non-head) = %v", err)
		}
		got := must[[]string](t)(s.TakeFollowers(ctx, key, "h", 3))
		if fmt.Sprint(got) != "[f1 f2 f3]" {
			t.Fatalf("TakeFollowers = %v", got)
		}
		// One more arrives while the head runs; it is taken too.
		joinAll(t, s, key, "f5")
		got = must[[]string](t)(s.TakeFollowers(ctx, key, "h", 10))
		if fmt.Sprint(got) != "[f4 f5]" {
			t.Fatalf("TakeFollowers 2 = %v", got)
		}
		if all := must[[]string](t)(s.MergedFollowers(ctx, key, "h")); fmt.Sprint(all) != "[f1 f2 f3 f4 f5]" {
			t.Fatalf("MergedFollowers = %v", all)
		}
		for _, f := range []string{"f1", "f5"} {
			into, ok, err := s.MergedInto(ctx, key, f)
			if err != nil || !ok || into != "h" {
				t.Fatalf("MergedInto(%s) = %q %v %v", f, into, ok, err)
			}
			// Its own execution learns it from Acquire, and does not
			// re-join the line.
			_, err = s.Acquire(ctx, key, f, "w", nil)
			var me *ordering.MergedError
			if !errors.As(err, &me) || me.Into != "h" {
				t.Fatalf("Acquire(%s) = %v", f, err)
			}
			if ordering.IsFailure(err) {
				t.Fatal("MergedError is a failure")
			}
		}
		if _, ok, _ := s.MergedInto(ctx, key, "h"); ok {
			t.Fatal("head reported merged")
		}
		if n := must[int](t)(s.Len(ctx, key)); n != 1 {
			t.Fatalf("Len = %d, want 1 (the head)", n)
		}
		if next, _ := l.Release(ctx, true); next != "" {
			t.Fatalf("next = %q", next)
		}
	})
}

func TestKeys(t *testing.T) {
	if k := ordering.ConversationKey("agent-1", "tg", "a:b{c}%"); k != "c:agent-1:tg:a%3Ab%7Bc%7D%25" {
		t.Fatalf("ConversationKey = %q", k)
	}
	if ordering.KeyFor(ordering.ScopeAgent, "x", "tg", "1") != ordering.AgentKey("x") {
		t.Fatal("ScopeAgent")
	}
	if ordering.KeyFor(ordering.ScopeConversation, "x", "tg", "1") != "c:x:tg:1" {
		t.Fatal("ScopeConversation")
	}
	if _, err := ordering.New(redis.NewClient(&redis.Options{}), ordering.Config{Prefix: "{x}"}); err == nil {
		t.Fatal("braced prefix accepted")
	}
}

// Many goroutines race for one key on the same Sequencer (miniredis and
// real): exactly one holds it at a time.
func TestLockExclusivityUnderRace(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-11")
		joinAll(t, s, key, "a")
		var wins atomic.Int32
		var wg sync.WaitGroup
		leases := make(chan *ordering.Lease, 16)
		for range 16 {
			wg.Go(func() {
				// Same task id: a takeover; different ids: not head.
				l, err := s.Acquire(ctx, key, "z"+uuid.NewString(), "w", nil)
				if err == nil {
					wins.Add(1)
					leases <- l
				}
			})
		}
		wg.Wait()
		close(leases)
		for l := range leases {
			l.Release(ctx, true)
		}
		if wins.Load() != 0 {
			t.Fatalf("%d non-head tasks acquired", wins.Load())
		}
	})
}

// AcquireIn queues Acquire's first try in the caller's pipeline: what follows it there runs
// with the lock taken (First), a contended lock answers as Acquire does, and a try whose
// script Redis did not have (a restarted Redis) is made again, with the same token.
func TestAcquireInAPipeline(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-pipe")
		joinAll(t, s, key, "a", "b")
		try := func(task string) (*ordering.Lease, *ordering.Acquiring, string, error) {
			t.Helper()
			p := b.rdb.Pipeline()
			a, err := s.AcquireIn(ctx, p, key, task, "w1")
			if err != nil {
				t.Fatal(err)
			}
			holder := p.HGet(ctx, ordering.LockKey(s, key), "task") // the caller's reads
			_, _ = p.Exec(ctx)
			l, err := a.Lease(ctx, nil)
			h, _ := holder.Result()
			return l, a, h, err
		}
		_, a, _, err := try("b")
		wantNYT(t, err, 1, "a", false)
		if a.First() {
			t.Error("First after a refusal")
		}
		la, a, holder, err := try("a")
		if err != nil || !a.First() || holder != "a" {
			t.Fatalf("lease %v, first %v, lock held by %q after the acquire in the same round trip; want a", err, a.First(), holder)
		}
		if _, err := la.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
		if b.mini == nil {
			return // no SCRIPT FLUSH on the shared Redis: other packages' tests use it meanwhile
		}
		// A Redis without the script: the queued try fails, Lease makes it again.
		if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		lb, a, _, err := try("b")
		if err != nil || a.First() {
			t.Fatalf("after a script flush: %v, first %v (want a lease from a later try)", err, a.First())
		}
		if task, _ := must2(t)(s.Holder(ctx, key)); task != "b" {
			t.Fatalf("holder %q", task)
		}
		if lb.Token() == "" {
			t.Fatal("no token")
		}
		_, _ = lb.Release(ctx, true)
	})
}

// TestJoinOfAMergedTaskDoesNotRejoin: a task that TakeFollowers
// merged into an earlier turn left the line for good, as a finished one
// did: a late Join (a duplicate delivery of its webhook) or JoinFront does
// not put it back, where it would head the line with nobody to run it.
func TestJoinOfAMergedTaskDoesNotRejoin(t *testing.T) {
	eachBackend(t, ordering.Config{MergedTTL: time.Hour}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.ConversationKey("agent-m", "slack", "C9")
		joinAll(t, s, key, "h", "f")
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "h", "w", nil))
		if got := must[[]string](t)(s.TakeFollowers(ctx, key, "h", 5)); len(got) != 1 || got[0] != "f" {
			t.Fatalf("TakeFollowers = %v", got)
		}
		if pos := must[int](t)(s.Join(ctx, key, "f")); pos != -1 {
			t.Fatalf("Join(merged) = %d, want -1", pos)
		}
		if pos := must[int](t)(s.JoinFront(ctx, key, "f")); pos != -1 {
			t.Fatalf("JoinFront(merged) = %d, want -1", pos)
		}
		if p := must[int](t)(s.Position(ctx, key, "f")); p != -1 {
			t.Fatalf("merged task back in the line at %d", p)
		}
		if _, err := l.Release(ctx, true); err != nil {
			t.Fatal(err)
		}
	})
}

// TestDeadHeadGraceIgnoresAFastClock: a client whose clock runs
// an hour fast joins a task whose enqueue never happens. Its join time is
// an hour ahead of the workers': the grace is for a join whose enqueue is
// still on its way (DeadHeadGrace), not for an hour, so the dead head is
// removed as soon as it would be with a right clock.
func TestDeadHeadGraceIgnoresAFastClock(t *testing.T) {
	eachBackend(t, ordering.Config{DeadHeadGrace: time.Second}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		fast := must[*ordering.Sequencer](t)(ordering.New(b.rdb, ordering.Config{Prefix: s.Config().Prefix,
			Now: func() time.Time { return time.Now().Add(time.Hour) }}))
		key := ordering.AgentKey("agent-fast")
		if _, err := fast.Join(ctx, key, "ghost"); err != nil {
			t.Fatal(err)
		}
		joinAll(t, s, key, "me")
		dead := func(_ context.Context, id string) (bool, error) { return id != "ghost", nil }
		time.Sleep(1100 * time.Millisecond) // one grace of the workers' clock
		l, err := s.Acquire(ctx, key, "me", "w", dead)
		if err != nil {
			t.Fatalf("Acquire behind a dead head joined an hour ahead: %v", err)
		}
		l.Release(ctx, true)
	})
}

// TestAcquireReportsTheDeadHeadsItRemoved: a task that is not
// next removes the dead head: its NotYourTurnError says so and names the
// new head, which its caller wakes (nobody else will: the turn ahead of it
// never ends).
func TestAcquireReportsTheDeadHeadsItRemoved(t *testing.T) {
	eachBackend(t, ordering.Config{DeadHeadGrace: -1}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.AgentKey("agent-dead")
		joinAll(t, s, key, "ghost", "next", "me")
		dead := func(_ context.Context, id string) (bool, error) { return id != "ghost", nil }
		_, err := s.Acquire(ctx, key, "me", "w", dead)
		wantNYT(t, err, 1, "next", false)
		var nyt *ordering.NotYourTurnError
		if errors.As(err, &nyt); nyt.RemovedDead != 1 {
			t.Fatalf("RemovedDead = %d, want 1", nyt.RemovedDead)
		}
		_, err = s.Acquire(ctx, key, "me", "w", dead)
		if errors.As(err, &nyt); nyt.RemovedDead != 0 {
			t.Fatalf("second Acquire: RemovedDead = %d, want 0", nyt.RemovedDead)
		}
	})
}

// Leave removes a task and names the task to wake: the new head, when the
// task left the head of a line that nobody else holds; nobody when it left
// from behind the head, when another task holds the line (its Release
// names the head), or when it was not in the line.
func TestLeaveNamesTheNewHead(t *testing.T) {
	eachBackend(t, ordering.Config{}, func(t *testing.T, b backend, s *ordering.Sequencer) {
		ctx := context.Background()
		key := ordering.ConversationKey("agent-1", "tg", "leave")
		for _, id := range []string{"a", "b", "c", "d", "e"} {
			if _, err := s.Join(ctx, key, id); err != nil {
				t.Fatal(err)
			}
		}
		l := must[*ordering.Lease](t)(s.Acquire(ctx, key, "a", "w", nil))
		for _, tc := range []struct{ id, next string }{
			{"c", ""}, // behind the head
			{"x", ""}, // not in the line
			{"a", ""}, // the head, but a holds the line: its Release names b
		} {
			if next, err := s.Leave(ctx, key, tc.id); err != nil || next != tc.next {
				t.Fatalf("Leave(%s) = %q, %v; want %q", tc.id, next, err, tc.next)
			}
		}
		if next, err := l.Release(ctx, true); err != nil || next != "b" {
			t.Fatalf("Release = %q, %v; want b", next, err)
		}
		if next, err := s.Leave(ctx, key, "b"); err != nil || next != "d" {
			t.Fatalf("Leave(b) = %q, %v; want d (the new head, free)", next, err)
		}
		if next, err := s.Leave(ctx, key, "d"); err != nil || next != "e" {
			t.Fatalf("Leave(d) = %q, %v; want e", next, err)
		}
		if next, err := s.Leave(ctx, key, "e"); err != nil || next != "" {
			t.Fatalf("Leave(e) = %q, %v; want \"\" (empty line)", next, err)
		}
	})
}
