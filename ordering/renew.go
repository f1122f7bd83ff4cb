package ordering

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewChunk bounds the locks one extendManyLua call extends. Redis runs a
// script alone, so one call over 10,000 locks would hold every other
// client up for milliseconds; the chunks of one pipeline let them in
// between, at no extra round trip.
const renewChunk = 500

// renewer renews every lease of one Sequencer. A single timer fires at the
// earliest due renewal, and that tick extends, in one round trip, every
// lease due within the next RenewEvery/2 (pulled forward, so that leases
// acquired at different times share ticks): a Sequencer makes at most about
// two renewal round trips per RenewEvery however many leases it holds.
// Between ticks nothing runs (the timer is not a goroutine), and with no
// lease held the timer is stopped.
//
// On a single Redis (*redis.Client) one extendManyLua call extends many
// locks; elsewhere (Redis Cluster, Ring: the locks of different
// conversations live in different slots) a pipeline of extendLua calls, one
// per lock, which go-redis sends as one round trip per node. When a single
// Redis answers the multi-key script with an error, its locks are tried
// again per key in the same tick; when that error is CROSSSLOT (a proxy in
// front of shards), the renewer extends per key from then on.
//
// There is no jitter: leases share ticks on purpose, since a tick costs one
// round trip whatever it renews, and renewChunk bounds the work of each
// script call. Different Sequencers (worker processes) tick independently.
type renewer struct {
	s       *Sequencer
	perKey  atomic.Bool // the multi-key script is refused: extend per key
	leaseMs string

	mu      sync.Mutex
	held    map[*Lease]struct{} // leases being renewed
	timer   *time.Timer         // nil until the first lease
	armed   bool                // timer set and not yet fired
	running bool                // a tick is in progress (at most one at a time)
}

// round is one renewal in flight.
type round struct {
	ctx    context.Context
	cancel context.CancelFunc
	live   int           // leases of the round not released yet (guarded by renewer.mu)
	done   chan struct{} // closed when the round's results are applied
}

func (r *renewer) init(s *Sequencer) {
	r.s = s
	r.leaseMs = strconv.FormatInt(s.cfg.Lease.Milliseconds(), 10)
	r.held = map[*Lease]struct{}{}
}

// add starts renewing l, whose lock was set by a request sent at sent.
func (r *renewer) add(l *Lease, sent time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	l.lastOK, l.due = sent, sent.Add(r.s.cfg.RenewEvery)
	r.held[l] = struct{}{}
	// Any lease already held is due no later than l: a timer armed (or a
	// tick running, which re-arms) covers l too.
	if !r.armed && !r.running {
		r.arm(l.due)
	}
}

// arm sets the timer to fire at t. Called with mu held.
func (r *renewer) arm(t time.Time) {
	d := time.Until(t)
	if r.timer == nil {
		r.timer = time.AfterFunc(d, r.tick)
	} else {
		r.timer.Reset(d)
	}
	r.armed = true
}

// rearm sets the timer for the earliest due lease, or leaves it stopped
// when none is held. Called with mu held, not armed, not running.
func (r *renewer) rearm() {
	var next time.Time
	for l := range r.held {
		if next.IsZero() || l.due.Before(next) {
			next = l.due
		}
	}
	if !next.IsZero() {
		r.arm(next)
	}
}

// remove stops renewing l and waits for a round in flight that includes it.
// Calling it again (Release twice) waits for that round too.
func (r *renewer) remove(l *Lease) {
	r.mu.Lock()
	rd := l.round
	if !l.stopped {
		l.stopped = true
		delete(r.held, l)
		if rd != nil {
			if rd.live--; rd.live == 0 {
				rd.cancel() // no one waits for its answer any more
			}
		}
		if len(r.held) == 0 && r.armed {
			r.timer.Stop() // idle: no timer left (a tick already firing finds nothing)
			r.armed = false
		}
	}
	r.mu.Unlock()
	if rd != nil {
		<-rd.done
	}
}

// tick runs on the timer: it declares lost the leases whose last
// extension is a whole lease old, extends the ones due in one round trip,
// applies the answers, and re-arms.
func (r *renewer) tick() {
	every, lease := r.s.cfg.RenewEvery, r.s.cfg.Lease
	r.mu.Lock()
	if r.running {
		// A stale firing (the timer was reset while it fired): the running
		// tick re-arms.
		r.mu.Unlock()
		return
	}
	r.armed = false
	now := time.Now()
	var batch, lost []*Lease
	for l := range r.held {
		switch {
		case now.Sub(l.lastOK) >= lease:
			// Redis unreachable for a whole lease: the lock may be gone.
			lost = append(lost, r.drop(l))
		case !l.due.After(now.Add(every / 2)):
			batch = append(batch, l)
		}
	}
	if len(batch) == 0 {
		r.rearm()
		r.mu.Unlock()
		markLost(lost)
		return
	}
	rd := &round{live: len(batch), done: make(chan struct{})}
	rd.ctx, rd.cancel = context.WithTimeout(context.Background(), every)
	for _, l := range batch {
		l.round = rd
	}
	r.running = true
	r.mu.Unlock()

	ours, errs := r.extend(rd.ctx, batch)
	rd.cancel()

	r.mu.Lock()
	for i, l := range batch {
		l.round = nil
		if l.stopped {
			continue // released meanwhile
		}
		switch {
		case errs[i] == nil && ours[i]:
			l.lastOK, l.due = now, now.Add(every)
		case errs[i] == nil:
			// Someone else holds the lock, or it expired.
			lost = append(lost, r.drop(l))
		case time.Since(l.lastOK) >= lease:
			lost = append(lost, r.drop(l))
		default:
			// Try again in RenewEvery, and no later than the lease's end
			// (then it is lost, unless that try succeeds).
			l.due = now.Add(every)
			if end := l.lastOK.Add(lease); end.Before(l.due) {
				l.due = end
			}
		}
	}
	r.running = false
	r.rearm()
	r.mu.Unlock()
	close(rd.done)
	markLost(lost)
}

// drop takes a lost lease out of the renewal. Called with mu held.
func (r *renewer) drop(l *Lease) *Lease {
	l.stopped = true
	delete(r.held, l)
	return l
}

func markLost(ls []*Lease) {
	for _, l := range ls {
		l.markLost()
	}
}

// extend extends the locks of batch in one round trip (per Redis node) and
// returns, per lease, whether its lock still held its token (and was
// extended), or the error of its extension.
func (r *renewer) extend(ctx context.Context, batch []*Lease) (ours []bool, errs []error) {
	ours, errs = make([]bool, len(batch)), make([]error, len(batch))
	if _, single := r.s.rdb.(*redis.Client); !single || r.perKey.Load() {
		r.extendEach(ctx, batch, ours, errs)
		return ours, errs
	}
	refused := r.extendMany(ctx, batch, ours, errs)
	if len(refused) == 0 {
		return ours, errs
	}
	// Redis answered the multi-key script with an error: try those locks
	// one by one. A proxy in front of shards refuses keys of different
	// slots for good (CROSSSLOT): then extend per key from now on.
	sub := make([]*Lease, len(refused))
	for j, i := range refused {
		sub[j] = batch[i]
		if redis.HasErrorPrefix(errs[i], "CROSSSLOT") {
			r.perKey.Store(true)
		}
	}
	subOurs, subErrs := make([]bool, len(sub)), make([]error, len(sub))
	r.extendEach(ctx, sub, subOurs, subErrs)
	for j, i := range refused {
		ours[i], errs[i] = subOurs[j], subErrs[j]
	}
	return ours, errs
}

// extendMany extends batch with extendManyLua, renewChunk locks per call,
// all calls in one pipeline. It returns the indexes of the leases whose
// call Redis refused with an error reply (other than NOSCRIPT, handled).
func (r *renewer) extendMany(ctx context.Context, batch []*Lease, ours []bool, errs []error) (refused []int) {
	var calls []scriptCall
	for lo := 0; lo < len(batch); lo += renewChunk {
		hi := min(lo+renewChunk, len(batch))
		keys, args := make([]string, 0, hi-lo), make([]any, 0, hi-lo+1)
		args = append(args, r.leaseMs)
		for _, l := range batch[lo:hi] {
			keys = append(keys, l.lock)
			args = append(args, l.token)
		}
		calls = append(calls, scriptCall{keys, args})
	}
	for c, cmd := range evalPipelined(ctx, r.s.rdb, extendManyLua, calls) {
		lo := c * renewChunk
		res, err := cmd.Slice()
		if err == nil && len(res) != len(calls[c].keys) {
			err = errors.New("ordering: renew: the extend script answered for " +
				strconv.Itoa(len(res)) + " locks, not " + strconv.Itoa(len(calls[c].keys)))
		}
		var rerr redis.Error
		for j := range calls[c].keys {
			if err != nil {
				errs[lo+j] = err
				if errors.As(err, &rerr) {
					refused = append(refused, lo+j)
				}
				continue
			}
			n, _ := res[j].(int64)
			ours[lo+j] = n == 1
		}
	}
	return refused
}

// extendEach extends batch with one extendLua call per lock, in one
// pipeline.
func (r *renewer) extendEach(ctx context.Context, batch []*Lease, ours []bool, errs []error) {
	calls := make([]scriptCall, len(batch))
	for i, l := range batch {
		calls[i] = scriptCall{[]string{l.lock}, []any{l.token, r.leaseMs}}
	}
	for i, cmd := range evalPipelined(ctx, r.s.rdb, extendLua, calls) {
		n, err := cmd.Int()
		ours[i], errs[i] = err == nil && n == 1, err
	}
}

// scriptCall is the keys and arguments of one call of a script.
type scriptCall struct {
	keys []string
	args []any
}

// evalPipelined runs sc once per call, all in one pipeline (go-redis sends
// it as one round trip per node). Where a node does not know the script
// (NOSCRIPT: restarted, flushed), those calls are sent again with the
// script's text, in a second pipeline.
func evalPipelined(ctx context.Context, rdb redis.UniversalClient, sc *redis.Script, calls []scriptCall) []*redis.Cmd {
	cmds := make([]*redis.Cmd, len(calls))
	// Errors are read per command below.
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range calls {
			cmds[i] = sc.EvalSha(ctx, p, c.keys, c.args...)
		}
		return nil
	})
	var again []int
	for i, cmd := range cmds {
		if redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			again = append(again, i)
		}
	}
	if len(again) > 0 {
		_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = sc.Eval(ctx, p, calls[i].keys, calls[i].args...)
			}
			return nil
		})
	}
	return cmds
}
