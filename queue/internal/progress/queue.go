package progress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Queue is one attempt's queue at the writer: its progress events (phase,
// answer_delta, tool), written in the order they were made and off the
// goroutine that made them (the stream's reader never waits on Redis, so a
// slow or restarting Redis cannot starve the read and fire its stall
// clock), and the writes the turn needs done before it goes on (Do).
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
// phase event, else the oldest event. The final event goes through Do
// after everything queued before it, and the turn then closes its queue, so
// nothing of the attempt follows its final event.
type Queue struct {
	wr     *Writer
	conv   record.Conversation
	failed func(error)  // a queued write failed (nobody waits for it)
	log    *slog.Logger // the attempt's (nil: Close logs nothing)
	// fenced, when set, says the turn was taken over from this worker: the
	// writer drops its writes, which end with fenceCause (SetFence).
	fenced     func() bool
	fenceCause error

	// head is the boxed front of the attempt's last event, which the next
	// shares when its fields are the same (see store.Head). Guarded by hmu.
	hmu  sync.Mutex
	head *store.Head

	// guarded by wr.mu
	queue    []item
	ready    bool
	closed   bool
	noEvents bool // EndEvents: the final event is written
	dropped  int
	// superseded counts passing phases replaced before they were written.
	superseded int
	// beat is the last lazy event (a heartbeat), reused for the next one
	// once it is written (!beat.busy): a thinking turn's beats allocate
	// little more than their time and data fields.
	beat *Event

	// The attempt's write keys (see store.ReplyEmitMany): its token, the
	// number of its last queued event (guarded by wr.mu), and its seq
	// floor. An event's number is given when it is queued, so numbers grow
	// in the order the writer sends the events.
	wtok  any
	lastN int64
	floor seqFloor

	// The save a PushSave left waiting (guarded by wr.mu).
	sw saveWait
}

// saveWait is the state of the save a PushSave left waiting: timer makes
// it due lazyWindow after the first save that waited; due says it is due
// (the writer takes it with the rest).
type saveWait struct {
	timer *time.Timer
	due   bool
}

// stop forgets the waiting save's timer: it was taken or dropped.
func (s *saveWait) stop() {
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	s.due = false
}

// waits reports whether the writer leaves q[i] waiting: a PushSave's save,
// not due (nor now: the writer stopped), with nothing after it but progress
// events that nobody waits for.
func (s *saveWait) waits(q []item, i int, now bool) bool {
	if it := q[i]; !it.save || it.bar != nil || s.due || now {
		return false
	}
	for _, later := range q[i+1:] {
		if later.ev == nil || later.bar != nil {
			return false
		}
	}
	return true
}

// NewQueue returns the queue of one attempt in conversation c: failed hears
// of a queued write that failed (nobody waited for it), log (the attempt's:
// nil for none) of the events Close dropped.
func (wr *Writer) NewQueue(c record.Conversation, failed func(error), log *slog.Logger) *Queue {
	return &Queue{wr: wr, conv: c, failed: failed, log: log, wtok: uuid.NewString()}
}

// SetFence has the writer drop the attempt's writes once fenced reports
// true (the turn was taken over from this worker): each ends with cause.
// Set it before the attempt writes.
func (p *Queue) SetFence(fenced func() bool, cause error) {
	p.fenced, p.fenceCause = fenced, cause
}

// keyLocked gives pe its write key: the attempt's token and the next
// number.
func (p *Queue) keyLocked(pe *Event) {
	p.lastN++
	pe.wtok, pe.wn, pe.floor = p.wtok, p.lastN, &p.floor
}

// Push queues ev for writing; it never waits on Redis.
func (p *Queue) Push(ev record.ReplyEvent) { p.pushEvent(ev, false) }

// PushLazy queues ev to be written within lazyWindow, with whatever else
// is due then (see lazyWindow).
func (p *Queue) PushLazy(ev record.ReplyEvent) { p.pushEvent(ev, true) }

func (p *Queue) pushEvent(ev record.ReplyEvent, lazy bool) {
	pe := p.claimEvent(lazy)
	p.hmu.Lock()
	err := Encode(p.wr.st, p.wr.complete, pe, &p.head, p.conv, ev, "")
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
		if ev.Type == record.EventPhase {
			pe.busy = false
			return
		}
		p.dropOne()
	}
	p.keyLocked(pe)
	p.queue = append(p.queue, item{ev: pe})
	if lazy {
		p.scheduleLazyLocked()
		return
	}
	p.scheduleLocked()
}

// claimEvent returns the event to prepare: for a lazy one (a heartbeat) the
// last lazy one when it is written, marked busy until it is written again.
func (p *Queue) claimEvent(lazy bool) *Event {
	if !lazy {
		return &Event{}
	}
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	pe := p.beat
	if pe == nil || pe.busy {
		pe = &Event{}
		p.beat = pe
	}
	pe.busy = true
	return pe
}

// Prepare encodes ev (with marker: see Encode) for the attempt's
// conversation, sharing what it can of the boxed front of the attempt's
// events, for Do.
func (p *Queue) Prepare(ev record.ReplyEvent, marker string) (*Event, error) {
	pe := &Event{}
	p.hmu.Lock()
	err := Encode(p.wr.st, p.wr.complete, pe, &p.head, p.conv, ev, marker)
	p.hmu.Unlock()
	if err != nil {
		return nil, err
	}
	return pe, nil
}

// PushOnce queues an event written once per marker key (accepted).
func (p *Queue) PushOnce(ev record.ReplyEvent, marker string) {
	pe, err := p.Prepare(ev, marker)
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
	p.queue = append(p.queue, item{ev: pe})
	p.scheduleLocked()
}

// PushSave queues a journal save of the whole record, written with the
// attempt's next write that is waited for (Do, Flush: at the latest the
// send's intent, or the end), or once lazyWindow has passed since the first
// save that waited, whichever comes first: the progress events queued
// meanwhile go without it. rec.SaveOp runs when the writer takes it, on
// the writer's goroutine. It replaces a save still waiting (whose SaveOp
// never runs: a newer record has everything an older one had); a failure
// goes to failed.
//
// So an instant turn's intermediate saves (its start, its thread, its run
// id) are replaced by the next one and by the end's own save (which drops
// them: DropQueuedSaves) instead of each costing Redis a call of the save
// script; a longer turn's record is journaled within lazyWindow. A crash in
// that window leaves the record as its last written save had it: the
// intent before the send is never among what waits (beforeSend writes it
// through Do, which takes the waiting save first), and a run id not yet
// journaled is found again by the otid.
//
// A turn passes an EncodedSave, encoded on its own goroutine: it changes
// its record without the lock in places, so the writer's goroutine must not
// read the record (the race detector found it when the turn's saves were
// encoded as they were taken). A saver that reads lazily must read only
// what is safe from another goroutine, and may then write a newer record
// than a save passed to Do after it (the next save puts that right).
func (p *Queue) PushSave(rec Saver) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed {
		return
	}
	p.dropSavesLocked()
	p.queue = append(p.queue, item{rec: rec, save: true})
	switch {
	case p.sw.due || p.wr.saveNow:
		p.scheduleLocked()
	case p.sw.timer == nil:
		p.sw.timer = time.AfterFunc(p.wr.lazyWait, func() {
			p.wr.mu.Lock()
			defer p.wr.mu.Unlock()
			p.sw.timer = nil
			for _, it := range p.queue {
				if it.save && it.bar == nil && !p.closed { // (not taken or dropped meanwhile)
					p.sw.due = true
					p.scheduleLocked()
					break
				}
			}
		})
	}
}

// PushOp queues op to go with the attempt's next round trip; nobody waits
// for it (a failure is told to failed).
func (p *Queue) PushOp(op store.Op) {
	p.wr.mu.Lock()
	defer p.wr.mu.Unlock()
	if p.closed {
		return
	}
	p.queue = append(p.queue, item{op: op})
	p.scheduleLocked()
}

// DropQueuedSaves drops the journal saves still waiting: the caller is
// about to write a newer record.
func (p *Queue) DropQueuedSaves() {
	p.wr.mu.Lock()
	p.dropSavesLocked()
	p.wr.mu.Unlock()
}

func (p *Queue) dropSavesLocked() {
	q := p.queue[:0]
	for _, it := range p.queue {
		if !it.save || it.bar != nil {
			q = append(q, it)
		}
	}
	if len(q) < len(p.queue) {
		p.sw.stop()
	}
	clear(p.queue[len(q):])
	p.queue = q
}

// supersedeLocked drops the turn's last waiting event when it is a passing
// phase (see Queue): a newer event is about to be queued. Only the last
// can be one: every queued event drops the passing phase before it.
func (p *Queue) supersedeLocked() {
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
		p.queue[n-1] = item{}
		p.queue = p.queue[:n-1]
		p.superseded++
		return
	}
}

// EndEvents refuses further events (they are dropped): the attempt's final
// event is written, or its progress is over. Writes through Do still go.
func (p *Queue) EndEvents() {
	p.wr.mu.Lock()
	p.noEvents = true
	p.wr.mu.Unlock()
}

// End lets the attempt's waiting progress events be written (for at most
// half of what is left of ctx: the final event and the journal keep the
// rest), then refuses further events (EndEvents): the attempt's end
// follows its progress. With Redis answering, nothing waits here.
func (p *Queue) End(ctx context.Context) {
	fctx := ctx
	if dl, ok := ctx.Deadline(); ok {
		var cancel context.CancelFunc
		fctx, cancel = context.WithTimeout(ctx, time.Until(dl)/2)
		defer cancel()
	}
	p.Flush(fctx)
	p.EndEvents()
}

func (p *Queue) waitingEvents() int {
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
func (p *Queue) dropOne() {
	first := -1
	for j, it := range p.queue {
		if it.ev == nil || it.bar != nil {
			continue
		}
		if it.ev.typ == record.EventPhase {
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

func (p *Queue) scheduleLocked() {
	p.readyLocked()
	p.wr.runLocked()
}

// scheduleLazyLocked has the writer run within lazyWindow (or with the
// next item that cannot wait).
func (p *Queue) scheduleLazyLocked() {
	p.readyLocked()
	if !p.wr.running && p.wr.lazyTimer == nil {
		p.wr.lazyTimer = time.AfterFunc(p.wr.lazyWait, p.wr.kick)
	}
}

func (p *Queue) readyLocked() {
	if !p.ready {
		p.ready = true
		p.wr.ready = append(p.wr.ready, p)
	}
}

// Do writes evs (events written once, per their marker key, when they have
// one) and ops after everything queued before them, and returns when they
// are written (the first error among them) or ctx ends. evs get their ID,
// Seq and written flag.
func (p *Queue) Do(ctx context.Context, evs []*Event, ops ...store.Op) error {
	return p.DoThen(ctx, nil, evs, ops...)
}

// DoThen is Do; when it stops waiting (ctx ended: ErrNotWaited), then runs,
// on a goroutine of its own, once the writes are done after all (nil), or
// failed or were dropped (their error; Close drops what waits). Then it is
// safe to read evs' results.
func (p *Queue) DoThen(ctx context.Context, then func(error), evs []*Event, ops ...store.Op) error {
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
		p.queue = append(p.queue, item{ev: pe, bar: b})
	}
	for _, op := range ops {
		p.queue = append(p.queue, item{op: op, bar: b})
	}
	if len(evs)+len(ops) == 0 {
		p.queue = append(p.queue, item{bar: b})
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
		return fmt.Errorf("%w: %w", ErrNotWaited, context.Cause(ctx))
	}
}

// ErrWritesDropped: Close dropped the writes before the writer took them.
var ErrWritesDropped = errors.New("queue: the attempt ended before its writes were taken")

// ErrNotWaited: Do returned before the writes were done (its context
// ended); they may still happen, and their events' results must not be read.
var ErrNotWaited = errors.New("queue: stopped waiting for the writes")

// Flush waits until every queued item is written, or ctx ends.
func (p *Queue) Flush(ctx context.Context) { _ = p.Do(ctx, nil) }

// Close drops what is still waiting and refuses new items: what could not
// be written by now is dropped, so nothing of the attempt follows its end.
// It returns the number of events dropped over the queue's life (and logs
// it, when there were any, to the attempt's log).
func (p *Queue) Close() int {
	p.wr.mu.Lock()
	p.closed = true
	p.sw.stop()
	p.dropped += p.waitingEvents()
	// A barrier's items are all waiting or all taken (the writer takes a
	// turn's whole queue): those of the waiting ones end here.
	for _, it := range p.queue {
		if b := it.bar; b != nil {
			if b.err == nil {
				b.err = ErrWritesDropped
			}
			if b.n--; b.n == 0 {
				b.done <- b.err
			}
		}
	}
	p.queue = nil
	n := p.dropped
	p.wr.mu.Unlock()
	if n > 0 && p.log != nil {
		p.log.Warn("progress events dropped while Redis was slow or down", "dropped", n)
	}
	return n
}
