package pace

import (
	"sync"
	"time"
)

// DefaultHeartbeatInterval is how often a Heartbeat repeats the phase.
const DefaultHeartbeatInterval = 4 * time.Second

// Heartbeat repeats the turn's current phase every interval, so that an
// integration's typing indicator (which typically lapses after ~5 s) stays
// alive while the agent thinks. It emits at once when the phase changes, and
// then every interval after the last emit while the phase stays the same.
// Emits never overlap: emit is called from one goroutine at a time, and it
// must not call Set or Stop itself. Always Stop a Heartbeat.
type Heartbeat[P ~string] struct {
	interval time.Duration
	emit     func(phase P, elapsed time.Duration)
	start    time.Time

	emitMu   sync.Mutex // held while emitting; guards phase, lastEmit, stopped and timer
	phase    P
	lastEmit time.Time
	stopped  bool
	timer    *time.Timer // re-armed after each beat; no goroutine while waiting
}

// NewHeartbeat starts a heartbeat; elapsed is measured from now. interval
// <= 0 means DefaultHeartbeatInterval. Nothing is emitted until the first Set.
func NewHeartbeat[P ~string](interval time.Duration, emit func(phase P, elapsed time.Duration)) *Heartbeat[P] {
	return NewHeartbeatSince(time.Now(), interval, emit)
}

// NewHeartbeatSince is NewHeartbeat with elapsed measured from start (for
// example the turn's first start, so that a retried attempt reports the time
// spent in the whole turn).
func NewHeartbeatSince[P ~string](start time.Time, interval time.Duration, emit func(phase P, elapsed time.Duration)) *Heartbeat[P] {
	if interval <= 0 {
		interval = DefaultHeartbeatInterval
	}
	h := &Heartbeat[P]{interval: interval, emit: emit, start: start}
	h.emitMu.Lock()
	h.timer = time.AfterFunc(interval, h.tick)
	h.emitMu.Unlock()
	return h
}

// Set makes phase the current phase; when it differs from the previous one
// it is emitted before Set returns. Setting "" pauses the repeats. After
// Stop, Set does nothing.
func (h *Heartbeat[P]) Set(phase P) {
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

func (h *Heartbeat[P]) emitLocked() {
	h.lastEmit = time.Now()
	h.emit(h.phase, h.lastEmit.Sub(h.start))
}

// Phase returns the current phase.
func (h *Heartbeat[P]) Phase() P {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	return h.phase
}

// Stop ends the heartbeat. When it returns, no emit is running or will run.
// Stop may be called any number of times.
func (h *Heartbeat[P]) Stop() {
	h.emitMu.Lock()
	defer h.emitMu.Unlock()
	h.stopped = true
	h.timer.Stop()
}

// tick runs on the timer: it emits when a beat is due and re-arms. A
// Heartbeat holds a timer, not a goroutine, while a turn waits.
func (h *Heartbeat[P]) tick() {
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
