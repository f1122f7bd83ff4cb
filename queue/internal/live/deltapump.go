package live

import (
	"sync"
	"time"

	"github.com/lettaq/lettaq/queue/internal/pace"
)

// deltaPump turns answer and reasoning text into answer_delta events
// through two DeltaBuffers, with one timer armed at the earliest deadline.
// Emits are serialized, so events keep the order of the text. The buffers
// and the timer are made when text first comes: a turn that only thinks
// holds neither.
type deltaPump struct {
	mu      sync.Mutex
	maxAge  time.Duration
	answer  *pace.DeltaBuffer // nil until answer text comes
	narr    *pace.DeltaBuffer // nil until reasoning text comes
	timer   *time.Timer
	emit    func(text string, narration bool)
	stopped bool
}

func newDeltaPump(maxAge time.Duration, emit func(string, bool)) *deltaPump {
	return &deltaPump{maxAge: maxAge, emit: emit}
}

// flushBuf empties b (nil: nothing buffered).
func flushBuf(b *pace.DeltaBuffer) string {
	if b == nil {
		return ""
	}
	return b.Flush()
}

// dueBuf is b.Due (nil: nothing due).
func dueBuf(b *pace.DeltaBuffer) (string, bool) {
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
		p.answer = pace.NewDeltaBuffer(p.maxAge, nil)
	} else if p.narr == nil && narration {
		p.narr = pace.NewDeltaBuffer(p.maxAge, nil)
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
	for _, b := range []*pace.DeltaBuffer{p.narr, p.answer} {
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
