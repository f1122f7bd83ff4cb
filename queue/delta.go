package queue

import (
	"strings"
	"sync"
	"time"
)

// DefaultDeltaMaxAge is how long a DeltaBuffer holds text without a newline.
const DefaultDeltaMaxAge = time.Second

// DeltaBuffer batches answer tokens into answer_delta events by line: text
// is released up to and including the last newline as soon as one arrives,
// and text without a newline is released once its oldest token has waited
// maxAge. The age clock starts when a token is written into an empty buffer,
// never when the buffer is created. Drive it with Write for every token,
// Due when the timer armed at Deadline fires (or on a ticker), and Flush at
// the end of the turn. Its methods are safe for concurrent use.
type DeltaBuffer struct {
	mu     sync.Mutex
	maxAge time.Duration
	now    func() time.Time
	buf    strings.Builder
	oldest time.Time // when the oldest unflushed byte was written; valid when buf is not empty
}

// NewDeltaBuffer returns a buffer that holds text for at most maxAge
// (<= 0: DefaultDeltaMaxAge), on the clock now (nil: time.Now).
func NewDeltaBuffer(maxAge time.Duration, now func() time.Time) *DeltaBuffer {
	if maxAge <= 0 {
		maxAge = DefaultDeltaMaxAge
	}
	if now == nil {
		now = time.Now
	}
	return &DeltaBuffer{maxAge: maxAge, now: now}
}

// Write adds s and returns the text to emit now, if any: everything up to
// and including the last newline, or everything when the oldest unflushed
// token is already maxAge old. Writing "" changes nothing (but may still
// release text that is due).
func (b *DeltaBuffer) Write(s string) (flush string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	t := b.now()
	if s != "" {
		if b.buf.Len() == 0 {
			b.oldest = t
		}
		b.buf.WriteString(s)
		if i := strings.LastIndexByte(s, '\n'); i >= 0 {
			// Everything before the newline goes, and what is left was all
			// written just now (it follows the newline within s).
			all := b.buf.String()
			cut := len(all) - len(s) + i + 1
			flush, rest := all[:cut], all[cut:]
			b.buf.Reset()
			b.buf.WriteString(rest)
			b.oldest = t
			return flush, true
		}
	}
	return b.dueLocked(t)
}

// Due returns all buffered text when its oldest token is at least maxAge
// old, and nothing otherwise.
func (b *DeltaBuffer) Due() (flush string, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.dueLocked(b.now())
}

func (b *DeltaBuffer) dueLocked(t time.Time) (string, bool) {
	if b.buf.Len() == 0 || t.Sub(b.oldest) < b.maxAge {
		return "", false
	}
	s := b.buf.String()
	b.buf.Reset()
	return s, true
}

// Deadline returns when the buffered text becomes due; ok is false when the
// buffer is empty (no timer is needed).
func (b *DeltaBuffer) Deadline() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf.Len() == 0 {
		return time.Time{}, false
	}
	return b.oldest.Add(b.maxAge), true
}

// Flush returns everything buffered (at the end of the turn) and empties
// the buffer.
func (b *DeltaBuffer) Flush() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// Len returns the number of buffered bytes.
func (b *DeltaBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// DefaultHeartbeatInterval is how often a Heartbeat repeats the phase.
const DefaultHeartbeatInterval = 4 * time.Second

// Heartbeat repeats the turn's current phase every interval, so that an
// integration's typing indicator (which typically lapses after ~5 s) stays
// alive while the agent thinks. It emits at once when the phase changes, and
// then every interval after the last emit while the phase stays the same.
// Emits never overlap: emit is called from one goroutine at a time, and it
// must not call Set or Stop itself. The repeats of every Heartbeat run from
// one timer (see beatClock): emit should return promptly, as heartbeats due
// at the same time beat one after another. Always Stop a Heartbeat.
type Heartbeat struct {
	interval time.Duration
	emit     func(phase string, elapsed time.Duration)
	start    time.Time

	emitMu   sync.Mutex // held while emitting; guards phase, lastEmit and stopped
	phase    string
	lastEmit time.Time
	stopped  bool
	// The next beat, on beats (guarded by beats.mu): due is its time since
	// beatEpoch, idx its place in the queue (-1: not queued).
	idx int32
	due time.Duration
}

// NewHeartbeat starts a heartbeat; elapsed is measured from now. interval
// <= 0 means DefaultHeartbeatInterval. Nothing is emitted until the first Set.
func NewHeartbeat(interval time.Duration, emit func(phase string, elapsed time.Duration)) *Heartbeat {
	return NewHeartbeatSince(time.Now(), interval, emit)
}

// NewHeartbeatSince is NewHeartbeat with elapsed measured from start (for
// example the turn's first start, so that a retried attempt reports the time
// spent in the whole turn).
func NewHeartbeatSince(start time.Time, interval time.Duration, emit func(phase string, elapsed time.Duration)) *Heartbeat {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	h := &Heartbeat{interval: interval, emit: emit, start: start, idx: -1}
	beats.add(h, interval)
	return h
}

// Set makes phase the current phase; when it differs from the previous one
// it is emitted before Set returns. Setting "" pauses the repeats. After
// Stop, Set does nothing.
func (h *Heartbeat) Set(phase string) {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	if h.stopped || phase == h.phase {
		return
	}
	h.phase = phase
	if phase == "" {
		return
	}
	h.emitLocked()
}

func (h *Heartbeat) emitLocked() {
	h.lastEmit = time.Now()
	h.emit(h.phase, h.lastEmit.Sub(h.start))
}

// Phase returns the current phase.
func (h *Heartbeat) Phase() string {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	return h.phase
}

// Stop ends the heartbeat. When it returns, no emit is running or will run.
// Stop may be called any number of times.
func (h *Heartbeat) Stop() {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	h.stopped = true
	beats.remove(h)
}

// tick runs when a beat is due (from beats): it emits when a beat is due
// and queues the next. A Heartbeat holds neither a timer nor a goroutine
// while a turn waits.
func (h *Heartbeat) tick() {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	if h.stopped {
		return
	}
	next := h.interval
	if h.phase != "" {
		if wait := h.interval - time.Since(h.lastEmit); wait > 0 {
			next = wait // a Set emitted since: keep the beat from it
		} else {
			h.emitLocked()
		}
	}
	beats.add(h, next)
}

// beats runs the beats of every Heartbeat of the process from one timer: a
// Heartbeat costs a place in its queue, not a timer of its own (whose
// every beat would also start a goroutine), which for 10,000 thinking turns
// is ~1.5 MB of timers and 2,500 goroutines started a second.
var beats beatClock

// beatEpoch is what Heartbeat.due counts from (monotonic).
var beatEpoch = time.Now()

// beatClock is a queue of heartbeats by their next beat, and one timer for
// the first. When it fires, the goroutine of the timer runs the beats that
// are due, one after another.
type beatClock struct {
	mu    sync.Mutex
	q     []*Heartbeat // a min-heap by due
	timer *time.Timer
	at    time.Duration // when timer fires (since beatEpoch); 0: not armed
	due   []*Heartbeat  // scratch of fire
}

// add queues h's next beat in d.
func (c *beatClock) add(h *Heartbeat, d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.due = time.Since(beatEpoch) + d
	if h.idx >= 0 {
		c.fix(h)
	} else {
		h.idx = int32(len(c.q))
		c.q = append(c.q, h)
		c.up(int(h.idx))
	}
	c.armLocked()
}

// remove takes h out of the queue (a beat running already ends at its
// stopped check).
func (c *beatClock) remove(h *Heartbeat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.idx < 0 {
		return
	}
	i, last := int(h.idx), len(c.q)-1
	if i != last {
		c.swap(i, last)
	}
	c.q[last] = nil
	c.q = c.q[:last]
	h.idx = -1
	if i != last {
		c.fix(c.q[i])
	}
	if len(c.q) == 0 {
		c.q = nil // a burst's array is let go
	}
}

// armLocked sets the timer for the first beat when it is not set for it or
// earlier.
func (c *beatClock) armLocked() {
	if len(c.q) == 0 {
		return
	}
	first := c.q[0].due
	if c.at != 0 && c.at <= first {
		return
	}
	c.at = max(first, 1)
	d := first - time.Since(beatEpoch)
	if c.timer == nil {
		c.timer = time.AfterFunc(d, c.fire)
	} else {
		c.timer.Reset(d)
	}
}

// fire runs the beats that are due and sets the timer for the next.
func (c *beatClock) fire() {
	c.mu.Lock()
	now := time.Since(beatEpoch)
	due := c.due[:0]
	for len(c.q) > 0 && c.q[0].due <= now {
		h := c.q[0]
		last := len(c.q) - 1
		c.swap(0, last)
		c.q[last] = nil
		c.q = c.q[:last]
		h.idx = -1
		c.down(0)
		due = append(due, h)
	}
	c.due = nil // fires may overlap: each takes its own scratch
	c.at = 0
	c.armLocked()
	c.mu.Unlock()
	for i, h := range due {
		h.tick()
		due[i] = nil
	}
	c.mu.Lock()
	if c.due == nil && cap(due) <= 1024 {
		c.due = due[:0]
	}
	c.mu.Unlock()
}

func (c *beatClock) swap(i, j int) {
	c.q[i], c.q[j] = c.q[j], c.q[i]
	c.q[i].idx, c.q[j].idx = int32(i), int32(j)
}

func (c *beatClock) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if c.q[p].due <= c.q[i].due {
			return
		}
		c.swap(i, p)
		i = p
	}
}

func (c *beatClock) down(i int) {
	for {
		l := 2*i + 1
		if l >= len(c.q) {
			return
		}
		m := l
		if r := l + 1; r < len(c.q) && c.q[r].due < c.q[l].due {
			m = r
		}
		if c.q[i].due <= c.q[m].due {
			return
		}
		c.swap(i, m)
		i = m
	}
}

// fix restores the heap's order around h, whose due changed.
func (c *beatClock) fix(h *Heartbeat) {
	c.up(int(h.idx))
	c.down(int(h.idx))
}
