package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
)

// progressMax bounds the progress events a turn keeps waiting for Redis.
const progressMax = 256

// writerMaxItems bounds the items one round trip of the writer carries
// (a turn's waiting items are never split between two).
const writerMaxItems = store.MaxTripItems

// writerTimeout bounds one round trip of the writer.
const writerTimeout = 5 * time.Second

// lazyWindow is how long a lazy event (a heartbeat: the phase again) may
// wait for company: the heartbeats of all thinking turns due within it go
// in one round trip and one command. With defaultHeartbeatInterval (4 s) a
// typing indicator is refreshed within 4.25 s, inside the ~5 s it lasts.
const lazyWindow = 250 * time.Millisecond

// writer writes the reply events and the other writes its turns queue
// (journal saves, intents) for a whole worker: one goroutine, running only
// while something waits, takes everything the turns have queued and writes
// it in one pipeline, the events of all turns in one script call. A turn's
// writes keep their order; turns are independent. So a thinking turn's
// heartbeat shares its round trip and its command with every other beat
// due then, and an instant turn's progress rides with its neighbours'.
type writer struct {
	rdb     redis.UniversalClient
	replies *Replies
	// exec runs a round trip's ops (store.Run; tests replace it).
	exec func(ctx context.Context, ops []store.Op) []error
	// tripped, when set, hears how each round trip went: its outage
	// (batchOutage), or nil (Worker.Ready).
	tripped func(error)
	// lazyWait is lazyWindow (tests set another).
	lazyWait time.Duration

	mu        sync.Mutex
	ready     []*progress // turns with queued items, in the order they became ready
	running   bool
	lazyTimer *time.Timer // armed while only lazy items wait

	// Scratch of the writer's goroutine (loop), reused from one round trip
	// to the next, so that a round trip of heartbeats allocates little
	// beyond what go-redis reads: the items taken from the turns' queues,
	// their errors, and the round trip that writes them (its ops).
	items []progressItem
	errs  []error
	batch []taken
	trip  store.Trip[*preparedEvent, progressItem, taken]
}

// progressKeep bounds the capacity a turn's queue keeps once the writer
// took its items: one item, what a thinking turn queues at a time (its
// next heartbeat), so that the array its send's intent grew (the record,
// the accepted event, the intent) is not held while the agent thinks.
// TestProgressKeepsOneSlot pins it.
const progressKeep = 1

func newWriter(rdb redis.UniversalClient, replies *Replies) *writer {
	wr := &writer{rdb: rdb, replies: replies, lazyWait: lazyWindow}
	wr.exec = func(ctx context.Context, ops []store.Op) []error {
		return store.RunFollowed(ctx, wr.rdb, ops, wr.trip.Followed())
	}
	return wr
}

// progress is one attempt's queue at the writer: its progress events
// (phase, answer_delta, tool), written in the order they were made and off
// the goroutine that made them (the stream's reader never waits on Redis,
// so a slow or restarting Redis cannot starve the read and fire its stall
// clock), and the writes the turn needs done before it goes on (do).
//
// A phase event that only says what the turn is doing now (connecting,
// streaming, thinking, …: not one that carries an approval) is replaced by
// the turn's next event when it is still waiting for the writer: by then the
// turn is doing something else, which the next event says. So under load,
// when events wait for a round trip, a consumer sees fewer phases, never a
// stale one after a newer event, and Redis writes fewer entries (an instant
// turn's connecting, streaming and thinking are usually superseded together).
//
// When progressMax events are waiting (Redis is down), a new phase event is
// dropped (heartbeats repeat it); any other event drops the oldest waiting
// phase event, else the oldest event. The final event goes through do
// after everything queued before it, and the turn then closes progress, so
// nothing of the attempt follows its final event.
type progress struct {
	wr     *writer
	conv   Conversation
	failed func(error) // a queued write failed (nobody waits for it)
	// fenced, when set, says the turn was taken over from this worker: the
	// writer drops its writes (takeover.go).
	fenced func() bool

	// head is the boxed front of the attempt's last event, which the next
	// shares when its fields are the same (see eventHead). Guarded by hmu.
	hmu  sync.Mutex
	head *eventHead

	// guarded by wr.mu
	queue    []progressItem
	ready    bool
	closed   bool
	noEvents bool // endEvents: the final event is written
	dropped  int
	// superseded counts passing phases replaced before they were written.
	superseded int
	// beat is the last lazy event (a heartbeat), reused for the next one
	// once it is written (!beat.busy): a thinking turn's beats allocate
	// little more than their time and data fields.
	beat *preparedEvent

	// The attempt's write keys (see store.ReplyEmitMany): its token, the
	// number of its last queued event (guarded by wr.mu), and its seq
	// floor. An event's number is given when it is queued, so numbers grow
	// in the order the writer sends the events.
	wtok  any
	lastN int64
	floor seqFloor
}

// keyLocked gives pe its write key: the attempt's token and the next
// number.
func (p *progress) keyLocked(pe *preparedEvent) {
	p.lastN++
	pe.wtok, pe.wn, pe.floor = p.wtok, p.lastN, &p.floor
}

// progressItem is an event, or other writes (op), or neither (a bare
// barrier: flush).
type progressItem struct {
	ev   *preparedEvent
	op   store.Op
	bar  *barrier    // set when the pusher waits for this item
	save bool        // a journal save of the whole record (op, or rec: pushSave)
	rec  recordSaver // set for a pushSave: its saveOp runs when the writer takes it
}

// Event is its event, for store.Trip.
func (it progressItem) Event() (*preparedEvent, bool) { return it.ev, it.ev != nil }

// Op is its other writes, for store.Trip: a queued save is encoded when
// the round trip reaches it (see pushSave).
func (it progressItem) Op() (store.Op, error) {
	if it.op == nil && it.rec != nil {
		return it.rec.saveOp()
	}
	return it.op, nil
}

// encodedSaver is a save encoded when it was pushed.
type encodedSaver struct {
	op  store.Op
	err error
}

func (s encodedSaver) saveOp() (store.Op, error) { return s.op, s.err }

// recordSaver makes the journal save of a turn's record as it is when
// called (journal.Attempt.SaveOp).
type recordSaver interface {
	saveOp() (store.Op, error)
}

// barrier is what a do call waits for: its last item's batch ran.
type barrier struct {
	done chan error // buffered: the writer never blocks on a caller that gave up
	err  error      // the first error of the call's items
	n    int        // items not yet written
}

func (wr *writer) newProgress(c Conversation, failed func(error)) *progress {
	return &progress{wr: wr, conv: c, failed: failed, wtok: uuid.NewString()}
}

// push queues ev for writing; it never waits on Redis.
func (p *progress) push(ev ReplyEvent) { p.pushEvent(ev, false) }

// pushLazy queues ev to be written within lazyWindow, with whatever else
// is due then (see lazyWindow).
func (p *progress) pushLazy(ev ReplyEvent) { p.pushEvent(ev, true) }

func (p *progress) pushEvent(ev ReplyEvent, lazy bool) {
	pe := p.claimEvent(lazy)
	p.hmu.Lock()
	err := p.wr.replies.prepareInto(pe, &p.head, p.conv, ev, "")
	p.hmu.Unlock()
	if err != nil {
		p.wr.mu.Lock()
		pe.busy = false
		p.wr.mu.Unlock()
		p.failed(err)
		return
	}
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed || p.noEvents {
		pe.busy = false
		p.dropped++
		return
	}
	p.supersedeLocked()
	if n := p.waitingEvents(); n >= progressMax {
		p.dropped++
		if ev.Type == EventPhase {
			pe.busy = false
			return
		}
		p.dropOne()
	}
	p.keyLocked(pe)
	p.queue = append(p.queue, progressItem{ev: pe})
	if lazy {
		p.scheduleLazyLocked()
		return
	}
	p.scheduleLocked()
}

// claimEvent returns the event to prepare: for a lazy one (a heartbeat) the
// last lazy one when it is written, marked busy until it is written again.
func (p *progress) claimEvent(lazy bool) *preparedEvent {
	if !lazy {
		return &preparedEvent{}
	}
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	pe := p.beat
	if pe == nil || pe.busy {
		pe = &preparedEvent{}
		p.beat = pe
	}
	pe.busy = true
	return pe
}

// prepare encodes ev (with marker: see prepare) for the attempt's
// conversation, sharing what it can of the boxed front of the attempt's
// events (see eventHead).
func (p *progress) prepare(ev ReplyEvent, marker string) (*preparedEvent, error) {
	pe := &preparedEvent{}
	p.hmu.Lock()
	err := p.wr.replies.prepareInto(pe, &p.head, p.conv, ev, marker)
	p.hmu.Unlock()
	if err != nil {
		return nil, err
	}
	return pe, nil
}

// pushOnce queues an event written once per marker key (accepted).
func (p *progress) pushOnce(ev ReplyEvent, marker string) {
	pe, err := p.prepare(ev, marker)
	if err != nil {
		p.failed(err)
		return
	}
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed {
		p.dropped++
		return
	}
	p.keyLocked(pe)
	p.queue = append(p.queue, progressItem{ev: pe})
	p.scheduleLocked()
}

// pushSave queues a journal save of the whole record, written with the
// attempt's next round trip: rec.saveOp runs when the writer takes it, on
// the writer's goroutine. It replaces a save still waiting (whose saveOp
// never runs: a newer record has everything an older one had); a failure
// goes to failed.
//
// A turn passes an encodedSaver, encoded on its own goroutine: it changes
// its record without the lock in places, so the writer's goroutine must not
// read the record (the race detector found it when the turn's saves were
// encoded as they were taken). A saver that reads lazily must read only
// what is safe from another goroutine, and may then write a newer record
// than a save passed to do after it (the next save puts that right).
func (p *progress) pushSave(rec recordSaver) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed {
		return
	}
	p.dropSavesLocked()
	p.queue = append(p.queue, progressItem{rec: rec, save: true})
	p.scheduleLocked()
}

// pushOp queues op to go with the attempt's next round trip; nobody waits
// for it (a failure is told to failed).
func (p *progress) pushOp(op store.Op) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed {
		return
	}
	p.queue = append(p.queue, progressItem{op: op})
	p.scheduleLocked()
}

// dropQueuedSaves drops the journal saves still waiting: the caller is
// about to write a newer record.
func (p *progress) dropQueuedSaves() {
	p.wr.mu.Lock()
	p.dropSavesLocked()
	p.wr.mu.Unlock()
}

func (p *progress) dropSavesLocked() {
	q := p.queue[:0]
	for _, it := range p.queue {
		if !it.save || it.bar != nil {
			q = append(q, it)
		}
	}
	clear(p.queue[len(q):])
	p.queue = q
}

// supersedeLocked drops the turn's last waiting event when it is a passing
// phase (see progress): a newer event is about to be queued. Only the last
// can be one: every queued event drops the passing phase before it.
func (p *progress) supersedeLocked() {
	for j := len(p.queue) - 1; j >= 0; j-- {
		it := p.queue[j]
		if it.ev == nil {
			continue // other writes keep their place
		}
		if it.bar != nil || !it.ev.passing {
			return
		}
		it.ev.busy = false // a reused heartbeat is free again
		n := len(p.queue)
		copy(p.queue[j:], p.queue[j+1:])
		p.queue[n-1] = progressItem{}
		p.queue = p.queue[:n-1]
		p.superseded++
		return
	}
}

// endEvents refuses further events (they are dropped): the attempt's final
// event is written, or its progress is over. Writes through do still go.
func (p *progress) endEvents() {
	p.wr.mu.Lock()
	p.noEvents = true
	p.wr.mu.Unlock()
}

func (p *progress) waitingEvents() int {
	n := 0
	for _, it := range p.queue {
		if it.ev != nil && it.bar == nil {
			n++
		}
	}
	return n
}

// dropOne drops the oldest waiting phase event, else the oldest event that
// nobody waits for.
func (p *progress) dropOne() {
	first := -1
	for j, it := range p.queue {
		if it.ev == nil || it.bar != nil {
			continue
		}
		if it.ev.typ == EventPhase {
			first = j
			break
		}
		if first < 0 {
			first = j
		}
	}
	if first >= 0 {
		p.queue = append(p.queue[:first], p.queue[first+1:]...)
	}
}

func (p *progress) scheduleLocked() {
	p.readyLocked()
	if !p.wr.running {
		p.wr.running = true
		go p.wr.loop()
	}
}

// scheduleLazyLocked has the writer run within lazyWindow (or with the
// next item that cannot wait).
func (p *progress) scheduleLazyLocked() {
	p.readyLocked()
	if !p.wr.running && p.wr.lazyTimer == nil {
		p.wr.lazyTimer = time.AfterFunc(p.wr.lazyWait, p.wr.kick)
	}
}

func (p *progress) readyLocked() {
	if !p.ready {
		p.ready = true
		p.wr.ready = append(p.wr.ready, p)
	}
}

// kick runs the writer for the lazy items that waited.
func (wr *writer) kick() {
	wr.mu.Lock()
	defer wr.mu.Unlock()
	wr.lazyTimer = nil
	if !wr.running && len(wr.ready) > 0 {
		wr.running = true
		go wr.loop()
	}
}

// do writes evs (events written once, per their marker key, when they have
// one) and ops after everything queued before them, and returns when they
// are written (the first error among them) or ctx ends. evs get their ID,
// Seq and written flag.
func (p *progress) do(ctx context.Context, evs []*preparedEvent, ops ...store.Op) error {
	return p.doThen(ctx, nil, evs, ops...)
}

// doThen is do; when it stops waiting (ctx ended: errNotWaited), then runs,
// on a goroutine of its own, once the writes are done after all (nil), or
// failed or were dropped (their error; close drops what waits). Then it is
// safe to read evs' results.
func (p *progress) doThen(ctx context.Context, then func(error), evs []*preparedEvent, ops ...store.Op) error {
	b := &barrier{done: make(chan error, 1)}
	p.wr.mu.Lock()
	if p.closed {
		p.wr.mu.Unlock()
		return errors.New("queue: the attempt's writes are closed")
	}
	if len(evs) > 0 {
		p.supersedeLocked()
	}
	for _, pe := range evs {
		p.keyLocked(pe)
		p.queue = append(p.queue, progressItem{ev: pe, bar: b})
	}
	for _, op := range ops {
		p.queue = append(p.queue, progressItem{op: op, bar: b})
	}
	if len(evs)+len(ops) == 0 {
		p.queue = append(p.queue, progressItem{bar: b})
	}
	b.n = max(len(evs)+len(ops), 1)
	p.scheduleLocked()
	p.wr.mu.Unlock()
	select {
	case err := <-b.done:
		return err
	case <-ctx.Done():
		if then != nil {
			go func() { then(<-b.done) }()
		}
		return fmt.Errorf("%w: %w", errNotWaited, context.Cause(ctx))
	}
}

// errWritesDropped: close dropped the writes before the writer took them.
var errWritesDropped = errors.New("queue: the attempt ended before its writes were taken")

// errNotWaited: do returned before the writes were done (its context
// ended); they may still happen, and their events' results must not be read.
var errNotWaited = errors.New("queue: stopped waiting for the writes")

// flush waits until every queued item is written, or ctx ends.
func (p *progress) flush(ctx context.Context) { _ = p.do(ctx, nil) }

// close drops what is still waiting and refuses new items. It returns the
// number of events dropped over the progress's life.
func (p *progress) close() int {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	p.closed = true
	p.dropped += p.waitingEvents()
	// A barrier's items are all waiting or all taken (the writer takes a
	// turn's whole queue): those of the waiting ones end here.
	for _, it := range p.queue {
		if b := it.bar; b != nil {
			if b.err == nil {
				b.err = errWritesDropped
			}
			if b.n--; b.n == 0 {
				b.done <- b.err
			}
		}
	}
	p.queue = nil
	return p.dropped
}

// taken is what the writer took of one turn for a round trip.
type taken struct {
	p     *progress
	items []progressItem
	errs  []error
}

// Writes is tk's items and their errors, for store.Trip.
func (tk taken) Writes() ([]progressItem, []error) { return tk.items, tk.errs }

func (wr *writer) loop() {
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
			wr.mu.Unlock()
			return
		}
		n, k := 0, 0
		for ; k < len(wr.ready) && n < writerMaxItems; k++ {
			n += len(wr.ready[k].queue)
		}
		if cap(wr.items) < n {
			wr.items = make([]progressItem, 0, n)
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
			items = append(items, p.queue...)
			batch = append(batch, taken{p: p, items: items[from:], errs: errs[from:len(items)]})
			clear(p.queue)
			p.queue = p.queue[:0]
			if cap(p.queue) > progressKeep {
				p.queue = nil
			}
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
func (wr *writer) write(batch []taken) {
	batch = wr.dropFenced(batch)
	ran := wr.trip.Run(wr.replies.st, batch, writerTimeout, wr.exec)
	if wr.tripped != nil && ran {
		// What the turns are told, not only what Redis answered.
		wr.tripped(batchOutage(batch))
	}
	// The events are written: free again (see progress.beat), before
	// anyone hears so.
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
// worker (their progress's fenced): they end with errTakenOver, unwritten,
// so that a worker that was paused or cut off writes nothing for them.
func (wr *writer) dropFenced(batch []taken) []taken {
	kept := batch[:0]
	for _, tk := range batch {
		if tk.p.fenced == nil || !tk.p.fenced() {
			kept = append(kept, tk)
			continue
		}
		wr.mu.Lock()
		for _, it := range tk.items {
			if it.ev != nil {
				it.ev.err, it.ev.busy = errTakenOver, false
			}
			if it.bar == nil {
				continue
			}
			if it.bar.err == nil {
				it.bar.err = errTakenOver
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
