package journal

import (
	"sync"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Attempt is one attempt's side of the journal: its turn's record with this
// attempt in it, what the attempt knows of the record's index entries, and
// the number of its runner, whose saves write nothing over a newer
// runner's (see Saver.SaveOp).
//
// The stream's reader, the writer and the attempt all reach the record:
// who changes it, and who reads it off the attempt's goroutine, holds the
// lock (Lock, Unlock); the saves copy it under the lock.
type Attempt struct {
	sv *Saver

	mu      sync.Mutex // guards the record while the attempt changes it and while a save copies it
	rec     *record.TurnRecord
	ix      Indexed // the record's index entries (see SaveOp)
	ixKnown bool    // ix is set: the attempt read the record
	runner  int64   // the runner's number: the turn's newest runner saves its record
	att     int     // index of this attempt in rec.Attempts
}

// NewAttempt returns an attempt with no record yet, whose saves sv makes.
func NewAttempt(sv *Saver) *Attempt { return &Attempt{sv: sv} }

// Lock locks the record, for a change or a read off the attempt's
// goroutine.
func (a *Attempt) Lock() { a.mu.Lock() }

// Unlock unlocks the record.
func (a *Attempt) Unlock() { a.mu.Unlock() }

// Rec is the record (nil before the attempt has one).
func (a *Attempt) Rec() *record.TurnRecord { return a.rec }

// Current is this attempt's entry in the record.
func (a *Attempt) Current() *record.Attempt { return &a.rec.Attempts[a.att] }

// Index is the index of this attempt's entry in the record's attempts.
func (a *Attempt) Index() int { return a.att }

// SetRecord makes rec the record (one that an earlier attempt finished, or
// another turn's), leaving the attempt's index as it is.
func (a *Attempt) SetRecord(rec *record.TurnRecord) { a.rec = rec }

// Begin makes rec the record, whose last attempt is this one.
func (a *Attempt) Begin(rec *record.TurnRecord) { a.rec, a.att = rec, len(rec.Attempts)-1 }

// Read notes the index entries of the record as read from the journal
// (nil, or without a task id: none), before the attempt changes it.
func (a *Attempt) Read(read *record.TurnRecord) {
	a.ix.init(read)
	a.ixKnown = true
}

// SetRunner sets the runner's number (store.StartReads.Runner), before the
// first save.
func (a *Attempt) SetRunner(n int64) { a.runner = n }

// Runner is the runner's number (0: not numbered).
func (a *Attempt) Runner() int64 { return a.runner }

// Copy is a copy of the record, taken under the lock: its attempts are its
// own, the rest of it shared.
func (a *Attempt) Copy() record.TurnRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	rec := *a.rec
	rec.Attempts = append([]record.Attempt(nil), a.rec.Attempts...)
	return rec
}

// Mark notes, under the lock, that the attempt entered phase now.
func (a *Attempt) Mark(phase string) {
	a.mu.Lock()
	c := a.Current()
	c.Phases = append(c.Phases, record.PhaseMark{Phase: phase, At: time.Now().UTC()})
	a.mu.Unlock()
}

// Latency is the turn's time from its enqueue (else its first start) to
// now; the caller holds the lock, or changes the record itself.
func (a *Attempt) Latency(now time.Time) time.Duration {
	if a.rec.EnqueuedAt.IsZero() {
		return now.Sub(a.rec.FirstStartedAt)
	}
	return now.Sub(a.rec.EnqueuedAt)
}

// Ended reports whether the record has this attempt's entry and it ended.
func (a *Attempt) Ended() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rec != nil && a.att < len(a.rec.Attempts) && !a.rec.Attempts[a.att].End.IsZero()
}

// SaveOp is the save of the record as it is now, by this attempt's runner,
// with what the attempt knows of its index entries (Saver.SaveOp:
// keepFinished writes nothing over a finished record).
func (a *Attempt) SaveOp(keepFinished bool) (store.Op, error) {
	rec := a.Copy()
	return a.sv.SaveOp(&rec, keepFinished, a.runner, a.indexed())
}

// indexed is what the attempt knows of its record's index entries, nil
// before it read the record.
func (a *Attempt) indexed() *Indexed {
	if !a.ixKnown {
		return nil
	}
	return &a.ix
}
