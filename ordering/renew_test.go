package ordering_test

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
)

// renewTrip is one round trip that carried lease renewals.
type renewTrip struct {
	many, one int      // calls of the many-lock and the one-lock extend script
	locks     int      // locks they extend
	keys      []string // the locks' keys
	err       error    // the round trip's error (nil: sent and answered)
}

// renewSpy is a go-redis hook that records the round trips carrying lease
// renewals. It can refuse the many-lock script as a proxy in front of
// shards does, and hold renewals until their context ends.
type renewSpy struct {
	one, many  string
	refuseMany bool          // answer the many-lock script with CROSSSLOT
	hold       bool          // renewal round trips wait for their context to end
	entered    chan struct{} // a renewal round trip started (buffered)

	mu    sync.Mutex
	trips []renewTrip
	seen  chan struct{} // a trip was recorded (buffered 1)
}

func newRenewSpy() *renewSpy {
	one, many := ordering.ExtendScripts()
	return &renewSpy{one: one, many: many, seen: make(chan struct{}, 1), entered: make(chan struct{}, 16)}
}

// crossSlotErr is the error reply of a Redis proxy asked to run a script
// over keys of different slots.
type crossSlotErr struct{}

func (crossSlotErr) Error() string { return "CROSSSLOT Keys in request don't hash to the same slot" }
func (crossSlotErr) RedisError()   {}

// kind says which extend script cmd calls ("" for none) and over how many locks.
func (s *renewSpy) kind(cmd redis.Cmder) (string, int) {
	a := cmd.Args()
	if len(a) < 3 {
		return "", 0
	}
	sha, _ := a[1].(string)
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
	case "eval":
		h := sha1.Sum([]byte(sha))
		sha = hex.EncodeToString(h[:])
	default:
		return "", 0
	}
	n, _ := strconv.Atoi(fmt.Sprint(a[2]))
	switch sha {
	case s.one:
		return "one", n
	case s.many:
		return "many", n
	}
	return "", 0
}

func (s *renewSpy) DialHook(next redis.DialHook) redis.DialHook { return next }

func (s *renewSpy) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if k, _ := s.kind(cmd); k != "" {
			panic("a renewal outside a pipeline: " + fmt.Sprint(cmd.Args()))
		}
		return next(ctx, cmd)
	}
}

func (s *renewSpy) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var t renewTrip
		var pass []redis.Cmder
		for _, cmd := range cmds {
			k, n := s.kind(cmd)
			if k != "" {
				for _, a := range cmd.Args()[3 : 3+n] {
					t.keys = append(t.keys, fmt.Sprint(a))
				}
			}
			switch k {
			case "many":
				t.many++
				t.locks += n
				if s.refuseMany {
					cmd.SetErr(crossSlotErr{})
					continue
				}
			case "one":
				t.one++
				t.locks += n
			}
			pass = append(pass, cmd)
		}
		if t.many+t.one == 0 {
			return next(ctx, cmds)
		}
		if len(pass) < len(cmds) {
			t.err = crossSlotErr{}
		}
		select {
		case s.entered <- struct{}{}:
		default:
		}
		if s.hold {
			<-ctx.Done()
			t.err = ctx.Err()
			for _, cmd := range cmds {
				cmd.SetErr(t.err)
			}
			s.record(t)
			return t.err
		}
		if len(pass) > 0 {
			if err := next(ctx, pass); err != nil {
				t.err = err
			}
		}
		s.record(t)
		return t.err
	}
}

func (s *renewSpy) record(t renewTrip) {
	s.mu.Lock()
	s.trips = append(s.trips, t)
	s.mu.Unlock()
	select {
	case s.seen <- struct{}{}:
	default:
	}
}

func (s *renewSpy) recorded() []renewTrip {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]renewTrip(nil), s.trips...)
}

// waitTrips waits until at least n renewal round trips were recorded, and
// returns them all.
func (s *renewSpy) waitTrips(t *testing.T, n int, within time.Duration) []renewTrip {
	t.Helper()
	deadline := time.NewTimer(within)
	defer deadline.Stop()
	for {
		if got := s.recorded(); len(got) >= n {
			return got
		}
		select {
		case <-s.seen:
		case <-deadline.C:
			t.Fatalf("%d renewal round trips within %v, want %d: %+v", len(s.recorded()), within, n, s.recorded())
		}
	}
}

// spySequencer returns a Sequencer like s on a new client of rdb's server
// that spy watches, with the extend scripts loaded.
func spySequencer(t *testing.T, rdb *redis.Client, cfg ordering.Config, spy *renewSpy) (*ordering.Sequencer, *redis.Client) {
	t.Helper()
	o := rdb.Options()
	c := redis.NewClient(&redis.Options{Addr: o.Addr, DB: o.DB, MaxRetries: o.MaxRetries})
	t.Cleanup(func() { _ = c.Close() })
	if err := ordering.LoadExtendScripts(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	c.AddHook(spy)
	s, err := ordering.New(c, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s, c
}

// acquireMany acquires one lease on each of n fresh keys, from 8
// goroutines, and returns them with their keys.
func acquireMany(t *testing.T, s *ordering.Sequencer, n int) ([]*ordering.Lease, []string) {
	t.Helper()
	ctx := context.Background()
	leases, keys := make([]*ordering.Lease, n), make([]string, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				keys[i] = ordering.ConversationKey("agent", "renew", strconv.Itoa(i))
				l, err := s.Acquire(ctx, keys[i], "t"+strconv.Itoa(i), "w", nil)
				if err != nil {
					errs <- err
					return
				}
				leases[i] = l
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	return leases, keys
}

func releaseAll(t *testing.T, leases []*ordering.Lease) {
	t.Helper()
	for _, l := range leases {
		if _, err := l.Release(context.Background(), true); err != nil {
			t.Error(err)
		}
	}
}

func wantIdle(t *testing.T, s *ordering.Sequencer) {
	t.Helper()
	if held, armed, running := ordering.RenewState(s); held != 0 || armed || running {
		t.Fatalf("renewer after the last Release: %d leases held, timer armed %v, tick running %v; want none", held, armed, running)
	}
}

func wantNotLost(t *testing.T, leases []*ordering.Lease, except int) {
	t.Helper()
	for i, l := range leases {
		if i == except {
			continue
		}
		select {
		case <-l.Lost():
			t.Fatalf("lease %d (%s) reported Lost", i, l.Key())
		default:
		}
	}
}

// Many leases of one Sequencer are renewed together: one round trip per
// renewal tick, in calls of at most RenewChunk locks, and about two ticks
// per RenewEvery however many leases there are.
func TestRenewalOneRoundTripForManyLeases(t *testing.T) {
	const lease = 3 * time.Second
	n := 3*ordering.RenewChunk + 10
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s0 *ordering.Sequencer) {
		spy := newRenewSpy()
		s, c := spySequencer(t, b.rdb, s0.Config(), spy)
		t0 := time.Now()
		leases, keys := acquireMany(t, s, n)
		acquired := time.Now()
		// Wait until every lock was renewed twice.
		var trips []renewTrip
		for done := 0; done < n; {
			trips = spy.waitTrips(t, len(trips)+1, 3*lease)
			renewed := map[string]int{}
			for _, tr := range trips {
				for _, k := range tr.keys {
					renewed[k]++
				}
			}
			done = 0
			for _, k := range keys {
				if renewed[lockKey(s, k)] >= 2 {
					done++
				}
			}
		}
		// Acquiring takes some time (more than RenewEvery/2 on a slow
		// machine), and leases acquired more than that apart are renewed by
		// different ticks. Ticks are more than RenewEvery/2 apart, and the
		// first is RenewEvery after the first acquire: renewing every lease
		// twice takes about 2 × (acquiring + RenewEvery) / RenewEvery + 1
		// of them (2 when acquiring is quick; one more for late timers),
		// not 2n.
		every := s.Config().RenewEvery
		if most := int(2*(acquired.Sub(t0)+every)/every) + 2; len(trips) > most {
			t.Errorf("%d round trips to renew %d leases twice (acquiring took %v), want ≤ %d: %+v",
				len(trips), n, acquired.Sub(t0), most, trips)
		}
		t.Logf("%d leases (acquired in %v) renewed twice in %d round trips", n, acquired.Sub(t0), len(trips))
		most := 0
		for i, tr := range trips {
			if tr.err != nil || tr.one != 0 || tr.many != (tr.locks+ordering.RenewChunk-1)/ordering.RenewChunk {
				t.Fatalf("renewal %d: %+v, want %d locks in calls of at most %d", i+1, tr, tr.locks, ordering.RenewChunk)
			}
			most = max(most, tr.many)
		}
		if most < 2 {
			t.Errorf("no renewal carried more than %d locks (%d calls at most): %+v", ordering.RenewChunk, most, trips)
		}
		// The round trips did extend every lock: one left alone since its
		// acquire would have at most Lease - (now - acquired) to live.
		for _, k := range keys {
			left := lease - time.Since(acquired)
			if ttl := c.PTTL(context.Background(), lockKey(s, k)).Val(); ttl <= left {
				t.Fatalf("lock of %s has %v to live, no more than if it was never renewed (%v)", k, ttl, left)
			}
		}
		wantNotLost(t, leases, -1)
		releaseAll(t, leases)
		wantIdle(t, s)
	})
}

// A lease whose lock was taken is reported lost; the others sharing its
// round trips keep being renewed.
func TestRenewalLosesOnlyTheStolenLease(t *testing.T) {
	const lease = 600 * time.Millisecond
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s0 *ordering.Sequencer) {
		ctx := context.Background()
		spy := newRenewSpy()
		s, c := spySequencer(t, b.rdb, s0.Config(), spy)
		leases, keys := acquireMany(t, s, 10)
		const stolen = 3
		lctx, cancel := leases[stolen].Context(ctx)
		defer cancel()
		c.HSet(ctx, lockKey(s, keys[stolen]), "token", "someone-else")
		select {
		case <-lctx.Done():
		case <-time.After(5 * lease):
			t.Fatal("the stolen lease did not report Lost")
		}
		if !errors.Is(context.Cause(lctx), ordering.ErrLeaseLost) {
			t.Fatalf("cause = %v", context.Cause(lctx))
		}
		// Two more renewals carry the nine others, and only them.
		n := len(spy.recorded())
		for _, tr := range spy.waitTrips(t, n+2, 5*lease)[n:] {
			if tr.err != nil || tr.many != 1 || tr.locks != 9 {
				t.Fatalf("renewal after the loss: %+v, want one call over the 9 other locks", tr)
			}
		}
		wantNotLost(t, leases, stolen)
		for i, k := range keys {
			if task, _ := must2(t)(s.Holder(ctx, k)); i != stolen && task != leases[i].TaskID() {
				t.Fatalf("lock of %s held by %q, want %s", k, task, leases[i].TaskID())
			}
		}
		releaseAll(t, leases)
		wantIdle(t, s)
	})
}

// A Redis that is down for less than a lease costs no lease; one that
// stays down for a whole lease makes every lease report Lost (and not
// before a lease is nearly over).
func TestRenewalRedisDown(t *testing.T) {
	const lease = 1500 * time.Millisecond
	type server struct {
		name        string
		addr        string
		stop, start func() error
	}
	t.Cleanup(func() { goleak.VerifyNone(t, goleak.IgnoreCurrent()) })
	var servers []server
	if _, ok := testredis.Real(t); ok {
		p := testredis.StartPersistent(t)
		servers = append(servers, server{"real", p.Addr, p.Stop, p.Start})
	}
	m := miniredis.RunT(t)
	servers = append(servers, server{"mini", m.Addr(), func() error { m.Close(); return nil }, func() error { return m.Restart() }})
	for _, srv := range servers {
		t.Run(srv.name, func(t *testing.T) {
			ctx := context.Background()
			spy := newRenewSpy()
			// No retries: a renewal fails at once while Redis is down.
			rdb := redis.NewClient(&redis.Options{Addr: srv.addr, MaxRetries: -1})
			defer rdb.Close()
			s, _ := spySequencer(t, rdb, ordering.Config{Lease: lease, Prefix: "test:ord:" + uuid.NewString()[:8] + ":"}, spy)
			leases, _ := acquireMany(t, s, 3)

			// A blink: one renewal fails, the next one works.
			if err := srv.stop(); err != nil {
				t.Fatal(err)
			}
			for {
				trips := spy.waitTrips(t, len(spy.recorded())+1, 2*lease)
				if trips[len(trips)-1].err != nil {
					break
				}
			}
			if err := srv.start(); err != nil {
				t.Fatal(err)
			}
			for {
				trips := spy.waitTrips(t, len(spy.recorded())+1, 2*lease)
				if tr := trips[len(trips)-1]; tr.err == nil {
					if tr.locks != 3 {
						t.Fatalf("renewal after the blink: %+v, want 3 locks", tr)
					}
					break
				}
			}
			wantNotLost(t, leases, -1)

			// Down for good: every lease is lost, once a lease has passed
			// since its last renewal (at most RenewEvery before the stop).
			if err := srv.stop(); err != nil {
				t.Fatal(err)
			}
			stopped := time.Now()
			for i, l := range leases {
				select {
				case <-l.Lost():
				case <-time.After(3 * lease):
					t.Fatalf("lease %d not lost %v after Redis went down", i, time.Since(stopped))
				}
			}
			if d, min := time.Since(stopped), lease-s.Config().RenewEvery; d < min {
				t.Fatalf("leases lost %v after Redis went down, want ≥ %v", d, min)
			}
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			for _, l := range leases {
				if _, err := l.Release(rctx, true); err == nil {
					t.Fatal("Release with Redis down: no error")
				}
			}
			wantIdle(t, s)
			if err := srv.start(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Release waits for a renewal in flight that includes its lease; when every
// lease of that renewal is released, the renewal is cut short instead of
// running to its timeout.
func TestReleaseWaitsForRenewalInFlight(t *testing.T) {
	const lease = 3 * time.Second
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s0 *ordering.Sequencer) {
		spy := newRenewSpy()
		spy.hold = true
		s, _ := spySequencer(t, b.rdb, s0.Config(), spy)
		leases, _ := acquireMany(t, s, 2)
		<-spy.entered // the renewal of both is in flight, and hangs
		returned := make(chan []renewTrip, 2)
		for _, l := range leases {
			go func() {
				_, err := l.Release(context.Background(), true)
				if err != nil {
					t.Error(err)
				}
				returned <- spy.recorded()
			}()
		}
		for range 2 {
			select {
			case trips := <-returned:
				if len(trips) != 1 || !errors.Is(trips[0].err, context.Canceled) {
					t.Fatalf("renewals when Release returned: %+v, want the one in flight, cancelled", trips)
				}
			case <-time.After(2 * lease):
				t.Fatal("Release still waits for the renewal of leases all released")
			}
		}
		wantNotLost(t, leases, -1)
		wantIdle(t, s)
	})
}

// Behind a proxy that refuses keys of different slots in one script
// (CROSSSLOT), the locks are renewed one call each from then on.
func TestRenewalPerKeyWhenManyRefused(t *testing.T) {
	const lease = 600 * time.Millisecond
	eachBackend(t, ordering.Config{Lease: lease}, func(t *testing.T, b backend, s0 *ordering.Sequencer) {
		spy := newRenewSpy()
		spy.refuseMany = true
		s, _ := spySequencer(t, b.rdb, s0.Config(), spy)
		leases, keys := acquireMany(t, s, 5)
		trips := spy.waitTrips(t, 4, 5*lease)
		if tr := trips[0]; tr.many != 1 || tr.locks != 5 || tr.err == nil {
			t.Fatalf("first renewal: %+v, want the refused many-lock call", tr)
		}
		for i, tr := range trips[1:] {
			if tr.err != nil || tr.many != 0 || tr.one != 5 {
				t.Fatalf("renewal %d: %+v, want 5 one-lock calls in one round trip", i+2, tr)
			}
		}
		wantNotLost(t, leases, -1)
		for i, k := range keys {
			if task, _ := must2(t)(s.Holder(context.Background(), k)); task != leases[i].TaskID() {
				t.Fatalf("lock of %s held by %q", k, task)
			}
		}
		releaseAll(t, leases)
		wantIdle(t, s)
	})
}

// On Redis Cluster the locks (in different slots) are renewed by one
// pipeline of one-lock calls per tick; a stolen lock is lost alone.
func TestRenewalOnCluster(t *testing.T) {
	const lease = 1500 * time.Millisecond
	cl := testredis.StartCluster(t, 3)
	cc := cl.Client(t)
	ctx := context.Background()
	if err := ordering.LoadExtendScripts(ctx, cc); err != nil {
		t.Fatal(err)
	}
	spy := newRenewSpy()
	cc.AddHook(spy)
	s, err := ordering.New(cc, ordering.Config{Lease: lease})
	if err != nil {
		t.Fatal(err)
	}
	const n = 30
	leases, keys := acquireMany(t, s, n)
	masters := map[string]bool{}
	for _, k := range keys {
		m, err := cc.MasterForKey(ctx, lockKey(s, k))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("%d locks on %d master(s): the test needs several", n, len(masters))
	}
	for i, tr := range spy.waitTrips(t, 2, 3*lease) {
		if tr.err != nil || tr.one != n || tr.many != 0 {
			t.Fatalf("renewal %d: %+v, want one pipeline of %d one-lock calls", i+1, tr, n)
		}
	}
	const stolen = 7
	cc.HSet(ctx, lockKey(s, keys[stolen]), "token", "someone-else")
	select {
	case <-leases[stolen].Lost():
	case <-time.After(3 * lease):
		t.Fatal("the stolen lease did not report Lost")
	}
	m := len(spy.recorded())
	if tr := spy.waitTrips(t, m+1, 3*lease)[m]; tr.err != nil || tr.one != n-1 {
		t.Fatalf("renewal after the loss: %+v, want %d one-lock calls", tr, n-1)
	}
	wantNotLost(t, leases, stolen)
	for i, k := range keys {
		if task, _ := must2(t)(s.Holder(ctx, k)); i != stolen && task != leases[i].TaskID() {
			t.Fatalf("lock of %s held by %q, want %s", k, task, leases[i].TaskID())
		}
	}
	releaseAll(t, leases)
	wantIdle(t, s)
}
