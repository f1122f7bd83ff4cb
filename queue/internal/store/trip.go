package store

import (
	"cmp"
	"context"
	"slices"
	"time"
)

// MaxTripItems bounds the items one round trip of a writer carries (a
// turn's waiting items are never split between two).
const MaxTripItems = 1024

// MaxTripEvents bounds the events of one script call.
const MaxTripEvents = 256

// tripKeep bounds the scratch a writer keeps between round trips (in
// items); a burst's larger scratch is let go.
const tripKeep = 4 * MaxTripItems

// Keep empties a scratch slice, keeping its array unless it grew past
// what a writer keeps between round trips.
func Keep[T any](s []T) []T {
	if cap(s) > tripKeep {
		return nil
	}
	return s[:0]
}

// TripEvent is an event of a round trip: written by EmitManyOp, and its
// own error, when its commands failed in a call that wrote the others.
type TripEvent interface {
	Emission
	WriteErr() error
}

// TripItem is one write of a turn in a round trip: an event, or other
// writes (an op, made when the trip reaches it), or neither.
type TripItem[E TripEvent] interface {
	// Event is the item's event (ok false: it is not one).
	Event() (e E, ok bool)
	// Op is the item's writes (nil: none; err: they could not be made,
	// the item's error).
	Op() (Op, error)
}

// TripWrites is what a round trip carries of one turn: its items, in
// order, and where their errors go (one per item).
type TripWrites[E TripEvent, I TripItem[E]] interface {
	Writes() (items []I, errs []error)
}

// Trip builds and runs a writer's round trips: the writes of many turns
// in one pipeline, the events of all turns in one script call, each turn's
// writes in their order. Its scratch is reused from one round trip to the
// next, so that a round trip of heartbeats allocates little beyond what
// go-redis reads: one goroutine runs a Trip at a time.
type Trip[E TripEvent, I TripItem[E], W TripWrites[E, I]] struct {
	pos    []int
	evs    []E
	refs   []itemRef
	covers []refSpan
	ops    []Op
	args   ArgArena
	// followed[k]: a later op of the round trip writes for a turn that op
	// k writes for (RunFollowed keeps them in order); last is each
	// turn's last op.
	followed []bool
	last     []int
	shard    []int // with N shards, the shard of each event of a round
}

// byShard orders a round's events (and their refs alike) by the shard of
// their stream, keeping each turn's order, and leaves each one's shard in
// tr.shard.
func (tr *Trip[E, I, W]) byShard(keys Keys, evs []E, refs []itemRef) {
	tr.shard = tr.shard[:0]
	sorted := true
	for i, e := range evs {
		h, _, _, _ := e.Encoded()
		tr.shard = append(tr.shard, keys.ShardOfKey(h.Keys()[0].(string)))
		sorted = sorted && (i == 0 || tr.shard[i-1] <= tr.shard[i])
	}
	if sorted {
		return
	}
	order := make([]int, len(evs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(tr.shard[a], tr.shard[b]) })
	es, rs, ss := slices.Clone(evs), slices.Clone(refs), slices.Clone(tr.shard)
	for i, o := range order {
		evs[i], refs[i], tr.shard[i] = es[o], rs[o], ss[o]
	}
}

// itemRef is an item of a round trip: batch[t].items[i].
type itemRef struct{ t, i int }

// refSpan is the items an op covers: refs[from:to].
type refSpan struct{ from, to int }

// Followed is the last round trip's followed flags (see RunFollowed), for
// the exec that runs its ops.
func (tr *Trip[E, I, W]) Followed() []bool { return tr.followed }

// follow sets tr.followed for the round trip's ops (covers and refs: which
// items each op writes).
func (tr *Trip[E, I, W]) follow(nturns int, ops []Op, covers []refSpan, refs []itemRef) {
	if cap(tr.last) < nturns {
		tr.last = make([]int, nturns)
	}
	last := tr.last[:nturns]
	for k, c := range covers {
		for _, r := range refs[c.from:c.to] {
			last[r.t] = k
		}
	}
	if cap(tr.followed) < len(ops) {
		tr.followed = make([]bool, len(ops))
	}
	tr.followed = tr.followed[:len(ops)]
	for k, c := range covers {
		f := false
		for _, r := range refs[c.from:c.to] {
			f = f || last[r.t] > k
		}
		tr.followed[k] = f
	}
}

// Run runs one round trip for batch on replies' streams, by exec (which
// runs ops, in order, as RunFollowed with Followed does; its context
// ends after timeout), and gives each
// item its error: the error of the op that carried it, or an event's own.
// It reports whether there was anything to run. The ops are built in
// rounds so that each turn's items keep their order: a round is one script
// call with the events at the front of every turn's remaining items, then
// the other ops that follow them.
func (tr *Trip[E, I, W]) Run(replies *Replies, batch []W, timeout time.Duration, exec func(ctx context.Context, ops []Op) []error) (ran bool) {
	ops, covers, refs, evs := tr.ops[:0], tr.covers[:0], tr.refs[:0], tr.evs[:0]
	if cap(tr.pos) < len(batch) {
		tr.pos = make([]int, len(batch))
	}
	pos := tr.pos[:len(batch)]
	clear(pos)
	defer func() {
		clear(ops)
		clear(evs)
		tr.ops, tr.covers, tr.refs, tr.evs = Keep(ops), Keep(covers), Keep(refs), Keep(evs)
		tr.args.Reset()
	}()
	for {
		moved := false
		// The ops hold their events' slice: evs and refs only grow
		// within a round trip (a new array leaves the old one intact).
		e0, r0 := len(evs), len(refs)
		for t := range batch {
			items, _ := batch[t].Writes()
			for pos[t] < len(items) {
				ev, ok := items[pos[t]].Event()
				if !ok {
					break
				}
				evs = append(evs, ev)
				refs = append(refs, itemRef{t, pos[t]})
				pos[t]++
			}
		}
		if replies.Keys.Sharded() {
			tr.byShard(replies.Keys, evs[e0:], refs[r0:])
		}
		for i := e0; i < len(evs); {
			j := min(len(evs), i+MaxTripEvents)
			if replies.Keys.Sharded() {
				// One script call per shard: its keys share one slot.
				for k := i + 1; k < j; k++ {
					if tr.shard[k-e0] != tr.shard[i-e0] {
						j = k
						break
					}
				}
			}
			ops = append(ops, EmitManyOp(replies, evs[i:j:j], &tr.args))
			covers = append(covers, refSpan{r0 + i - e0, r0 + j - e0})
			moved = true
			i = j
		}
		for t := range batch {
			items, errs := batch[t].Writes()
			for pos[t] < len(items) {
				if _, ok := items[pos[t]].Event(); ok {
					break
				}
				// A queued save is encoded now, from the record as it is;
				// the turn's earlier items are before it.
				op, err := items[pos[t]].Op()
				if err != nil {
					errs[pos[t]] = err
					op = nil
				}
				if op != nil {
					ops = append(ops, op)
					refs = append(refs, itemRef{t, pos[t]})
					covers = append(covers, refSpan{len(refs) - 1, len(refs)})
				}
				pos[t]++
				moved = true
			}
		}
		if !moved {
			break
		}
	}
	if len(ops) == 0 {
		return false
	}
	tr.follow(len(batch), ops, covers, refs)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	errs := exec(ctx, ops)
	cancel()
	for k, err := range errs {
		for _, r := range refs[covers[k].from:covers[k].to] {
			items, ierrs := batch[r.t].Writes()
			e := err
			if ev, ok := items[r.i].Event(); e == nil && ok {
				e = ev.WriteErr() // its own error, in a call that wrote the others
			}
			if e != nil {
				ierrs[r.i] = e
			}
		}
	}
	return true
}
