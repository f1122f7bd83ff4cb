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
// must not call Set or Stop itself. Always Stop a Heartbeat.
type Heartbeat struct {
	interval time.Duration
	emit     func(phase string, elapsed time.Duration)
	start    time.Time

	emitMu   sync.Mutex // held while emitting; guards phase, lastEmit, stopped and timer
	phase    string
	lastEmit time.Time
	stopped  bool
	timer    *time.Timer // re-armed after each beat; no goroutine while waiting
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
	h := &Heartbeat{interval: interval, emit: emit, start: start}
	h.emitMu.Lock()
	h.timer = time.AfterFunc(interval, h.tick)
	h.emitMu.Unlock()
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
	h.timer.Stop()
}

// tick runs on the timer: it emits when a beat is due and re-arms. A
// Heartbeat holds a timer, not a goroutine, while a turn waits.
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
	h.timer.Reset(next)
}

// deltaPump turns answer and reasoning text into answer_delta events
// through two DeltaBuffers, with one timer armed at the earliest deadline.
// Emits are serialized, so events keep the order of the text. The buffers
// and the timer are made when text first comes: a turn that only thinks
// holds neither.
type deltaPump struct {
	mu      sync.Mutex
	maxAge  time.Duration
	answer  *DeltaBuffer // nil until answer text comes
	narr    *DeltaBuffer // nil until reasoning text comes
	timer   *time.Timer
	emit    func(text string, narration bool)
	stopped bool
}

func newDeltaPump(maxAge time.Duration, emit func(string, bool)) *deltaPump {
	return &deltaPump{maxAge: maxAge, emit: emit}
}

// flushBuf empties b (nil: nothing buffered).
func flushBuf(b *DeltaBuffer) string {
	if b == nil {
		return ""
	}
	return b.Flush()
}

// dueBuf is b.Due (nil: nothing due).
func dueBuf(b *DeltaBuffer) (string, bool) {
	if b == nil {
		return "", false
	}
	return b.Due()
}

func (p *deltaPump) write(narration bool, s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if p.answer == nil && !narration {
		p.answer = NewDeltaBuffer(p.maxAge, nil)
	} else if p.narr == nil && narration {
		p.narr = NewDeltaBuffer(p.maxAge, nil)
	}
	buf, other := p.answer, p.narr
	if narration {
		buf, other = p.narr, p.answer
	}
	if rest := flushBuf(other); rest != "" {
		p.emit(rest, !narration) // keep the order when the kind changes
	}
	if out, ok := buf.Write(s); ok {
		p.emit(out, narration)
	}
	p.armLocked()
}

func (p *deltaPump) armLocked() {
	var at time.Time
	for _, b := range []*DeltaBuffer{p.narr, p.answer} {
		if b == nil {
			continue
		}
		if d, ok := b.Deadline(); ok && (at.IsZero() || d.Before(at)) {
			at = d
		}
	}
	if at.IsZero() {
		if p.timer != nil {
			p.timer.Stop()
		}
		return
	}
	wait := max(time.Until(at), 0)
	if p.timer == nil {
		p.timer = time.AfterFunc(wait, p.fire)
	} else {
		p.timer.Reset(wait)
	}
}

func (p *deltaPump) fire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if out, ok := dueBuf(p.narr); ok {
		p.emit(out, true)
	}
	if out, ok := dueBuf(p.answer); ok {
		p.emit(out, false)
	}
	p.armLocked()
}

// flush emits what is buffered now (before an event that must follow it).
func (p *deltaPump) flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	if s := flushBuf(p.narr); s != "" {
		p.emit(s, true)
	}
	if s := flushBuf(p.answer); s != "" {
		p.emit(s, false)
	}
	p.armLocked()
}

// finish stops the timer; with flush, what is buffered is emitted first.
func (p *deltaPump) finish(flush bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return
	}
	p.stopped = true
	if p.timer != nil {
		p.timer.Stop()
	}
	if flush {
		if s := flushBuf(p.narr); s != "" {
			p.emit(s, true)
		}
		if s := flushBuf(p.answer); s != "" {
			p.emit(s, false)
		}
	}
}
