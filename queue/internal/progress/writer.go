// Package progress is the worker's writer: the reply events, journal saves and other writes
// that the turns queue, written for all turns at once in shared round trips. A turn's
// attempt holds one Queue (its writes, in their order); the Writer takes what every queue
// holds and writes it in one pipeline, the events of all turns in one script call.
//
// What it needs of the worker it gets at construction: the reply streams' keys and scripts
// (store.Replies), how an event is completed and encoded (Complete: queue's Replies), and
// for each attempt its conversation, where a failed write is told, and its fence.
package progress

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
)

// progressMax bounds the progress events a turn keeps waiting for Redis.
const progressMax = 256

// writerMaxItems bounds the items one round trip of the writer carries
// (a turn's waiting items are never split between two).
const writerMaxItems = store.MaxTripItems

// TripTimeout bounds one round trip of the writer.
const TripTimeout = 5 * time.Second

// lazyWindow is how long a lazy event (a heartbeat: the phase again) may
// wait for company: the heartbeats of all thinking turns due within it go
// in one round trip and one command. With the worker's default heartbeat
// interval (4 s) a typing indicator is refreshed within 4.25 s, inside the
// ~5 s it lasts.
const lazyWindow = 250 * time.Millisecond

// progressKeep bounds the capacity a turn's queue keeps once the writer
// took its items: one item, what a thinking turn queues at a time (its
// next heartbeat), so that the array its send's intent grew (the record,
// the accepted event, the intent) is not held while the agent thinks.
// TestProgressKeepsOneSlot pins it.
const progressKeep = 1

// Writer writes the reply events and the other writes its turns queue
// (journal saves, intents) for a whole worker: one goroutine, running only
// while something waits, takes everything the turns have queued and writes
// it in one pipeline, the events of all turns in one script call. A turn's
// writes keep their order; turns are independent. So a thinking turn's
// heartbeat shares its round trip and its command with every other beat
// due then, and an instant turn's progress rides with its neighbours'.
//
// Its loop is started in one place (runLocked), when a write waits, and
// ends by itself when nothing waits; Stop, the worker's last step, writes
// what waits at once and waits for the loop to end.
type Writer struct {
	rdb      redis.UniversalClient
	st       *store.Replies
	complete Complete
	// Exec runs a round trip's ops (store.RunFollowed; tests replace it
	// before the first write).
	Exec func(ctx context.Context, ops []store.Op) []error
	// Tripped, when set before the first write, hears how each round trip
	// went: its outage (see batchOutage), or nil (the worker's readiness).
	Tripped func(error)
	// lazyWait is lazyWindow (tests set another).
	lazyWait time.Duration

	mu        sync.Mutex
	ready     []*Queue // turns with queued items, in the order they became ready
	running   bool
	idle      chan struct{} // closed when the running loop ends (nil: not running)
	lazyTimer *time.Timer   // armed while only lazy items wait
	saveNow   bool          // Stop ran: a queued save no longer waits (see PushSave)

	// Scratch of the writer's goroutine (loop), reused from one round trip
	// to the next, so that a round trip of heartbeats allocates little
	// beyond what go-redis reads: the items taken from the turns' queues,
	// their errors, and the round trip that writes them (its ops).
	items []item
	errs  []error
	batch []taken
	trip  store.Trip[*Event, item, taken]
}

// NewWriter returns the writer of st's reply streams (and of the other
// writes its turns queue) on rdb; complete completes and encodes their
// events.
func NewWriter(rdb redis.UniversalClient, st *store.Replies, complete Complete) *Writer {
	wr := &Writer{rdb: rdb, st: st, complete: complete, lazyWait: lazyWindow}
	wr.Exec = func(ctx context.Context, ops []store.Op) []error {
		return store.RunFollowed(ctx, wr.rdb, ops, wr.trip.Followed())
	}
	return wr
}

// Start has nothing to start: the loop runs while writes wait (the
// worker's turns write before its parts start when they are run by a
// Handler of their own). It makes the writer one of the worker's parts.
func (wr *Writer) Start(context.Context) error { return nil }

// Stop writes the lazy items at once and waits, for at most TripTimeout,
// for the loop to write what waits and end: the worker's last step before
// it closes its Redis clients, once every attempt closed its queue (which
// drops a save still waiting: see PushSave). A write queued later runs the
// loop again, a save included.
func (wr *Writer) Stop() {
	wr.mu.Lock()
	wr.saveNow = true
	if wr.lazyTimer != nil {
		wr.lazyTimer.Stop()
		wr.lazyTimer = nil
	}
	if len(wr.ready) > 0 {
		wr.runLocked()
	}
	idle := wr.idle
	wr.mu.Unlock()
	if idle == nil {
		return
	}
	t := time.NewTimer(TripTimeout)
	defer t.Stop()
	select {
	case <-idle:
	case <-t.C:
	}
}

// runLocked starts the loop unless it runs: the one place it starts.
func (wr *Writer) runLocked() {
	if wr.running {
		return
	}
	wr.running = true
	wr.idle = make(chan struct{})
	go wr.loop(wr.idle)
}

// kick runs the writer for the lazy items that waited.
func (wr *Writer) kick() {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.lazyTimer = nil
	if len(wr.ready) > 0 {
		wr.runLocked()
	}
}

// taken is what the writer took of one turn for a round trip.
type taken struct {
	p     *Queue
	items []item
	errs  []error
}

// Writes is tk's items and their errors, for store.Trip.
func (tk taken) Writes() ([]item, []error) { return tk.items, tk.errs }

func (wr *Writer) loop(idle chan struct{}) {
	for {
		wr.mu.Lock()
		// The scratch lets go of the last round trip's items.
		clear(wr.items)
		clear(wr.errs)
		clear(wr.batch)
		wr.items, wr.errs, wr.batch = store.Keep(wr.items), store.Keep(wr.errs), store.Keep(wr.batch)
		if len(wr.ready) == 0 {
			wr.ready = store.Keep(wr.ready)
			wr.running = false
			wr.idle = nil
			close(idle)
			wr.mu.Unlock()
			return
		}
		n, k := 0, 0
		for ; k < len(wr.ready) && n < writerMaxItems; k++ {
			n += len(wr.ready[k].queue)
		}
		if cap(wr.items) < n {
			wr.items = make([]item, 0, n)
		}
		if cap(wr.errs) < n {
			wr.errs = make([]error, n)
		}
		items, errs, batch := wr.items[:0], wr.errs[:n], wr.batch[:0]
		// The array may hold the errors of an earlier round trip (keep
		// cut the slice, not what is behind it): a write here reports only
		// its own error (an outage's errors came back for good).
		clear(errs)
		for j := range k {
			p := wr.ready[j]
			wr.ready[j] = nil
			p.ready = false
			if len(p.queue) == 0 {
				continue
			}
			from := len(items)
			var left item // a save that waits (see PushSave)
			for i, it := range p.queue {
				if left.save || !p.sw.waits(p.queue, i, wr.saveNow) {
					if it.save {
						p.sw.stop()
					}
					items = append(items, it)
					continue
				}
				left = it
			}
			clear(p.queue)
			p.queue = p.queue[:0]
			if cap(p.queue) > progressKeep {
				p.queue = nil
			}
			if left.save {
				p.queue = append(p.queue, left)
			}
			if len(items) == from {
				continue
			}
			batch = append(batch, taken{p: p, items: items[from:], errs: errs[from:len(items)]})
		}
		if k == len(wr.ready) {
			wr.ready = wr.ready[:0]
		} else {
			wr.ready = wr.ready[k:]
		}
		wr.items, wr.errs, wr.batch = items, errs, batch
		wr.mu.Unlock()
		wr.write(batch)
	}
}

// write runs one round trip for batch (store.Trip: each turn's items in
// their order, the events of all turns in one script call), then tells
// the turns.
func (wr *Writer) write(batch []taken) {
	batch = wr.dropFenced(batch)
	ran := wr.trip.Run(wr.st, batch, TripTimeout, wr.Exec)
	if wr.Tripped != nil && ran {
		// What the turns are told, not only what Redis answered.
		wr.Tripped(batchOutage(batch))
	}
	// The events are written: free again (see Queue.beat), before anyone
	// hears so.
	wr.mu.Lock()
	for _, tk := range batch {
		for _, it := range tk.items {
			if it.ev != nil && it.ev.busy {
				it.ev.busy = false
				it.ev.at, it.ev.data = nil, nil // kept between beats: only the event itself
			}
		}
	}
	wr.mu.Unlock()
	for _, tk := range batch {
		var lost error
		for i, it := range tk.items {
			err := tk.errs[i]
			if it.bar == nil {
				if err != nil && lost == nil {
					lost = err
				}
				continue
			}
			if it.ev != nil {
				it.ev.err = err
			}
			if err != nil && it.bar.err == nil {
				it.bar.err = err
			}
			if it.bar.n--; it.bar.n == 0 {
				it.bar.done <- it.bar.err
			}
		}
		if lost != nil {
			tk.p.failed(lost)
		}
	}
}

// dropFenced takes out of batch the writes of turns taken over from this
// worker (their queue's fence): they end with the fence's cause, unwritten,
// so that a worker that was paused or cut off writes nothing for them.
func (wr *Writer) dropFenced(batch []taken) []taken {
	kept := batch[:0]
	for _, tk := range batch {
		if tk.p.fenced == nil || !tk.p.fenced() {
			kept = append(kept, tk)
			continue
		}
		cause := tk.p.fenceCause
		wr.mu.Lock()
		for _, it := range tk.items {
			if it.ev != nil {
				it.ev.err, it.ev.busy = cause, false
			}
			if it.bar == nil {
				continue
			}
			if it.bar.err == nil {
				it.bar.err = cause
			}
			if it.bar.n--; it.bar.n == 0 {
				it.bar.done <- it.bar.err
			}
		}
		wr.mu.Unlock()
	}
	clear(batch[len(kept):])
	return kept
}

// batchOutage is the outage the errors a round trip gives its items show:
// the first error when every item failed and it is not Redis refusing a
// command for a reason of its own (a wrong type, a script error: that
// item's trouble, not the writer's), else nil.
func batchOutage(batch []taken) error {
	var first error
	for _, tk := range batch {
		for _, err := range tk.errs {
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
	}
	if !IsOutage(first) {
		return nil
	}
	return first
}

// IsOutage reports whether err says Redis cannot be reached or cannot take
// writes now (a connection error, a timeout, a server loading its data,
// that is a replica, or that is full: maxmemory reached under noeviction
// refuses every write with OOM while it still answers reads and PING),
// rather than refusing a command of ours.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // not a reply: the connection, a timeout, a closed client
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "OOM"} {
		if redis.HasErrorPrefix(re, p) {
			return true
		}
	}
	return false
}
