// Package pace times what a turn tells its conversation while it runs:
// answer text batched into deltas by line and age (DeltaBuffer), and the
// phase repeated while the agent thinks (Heartbeat).
package pace

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
