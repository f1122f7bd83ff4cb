package journal

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Index is one of the journal's indexes of turns; the indexes are in the
// order a save passes them (store.NewJournal's indexes, a save's flags).
type Index int

// The indexes.
const (
	IndexRecent   Index = iota // every turn
	IndexStalls                // a turn with an attempt that a clock ended (TimeoutClock)
	IndexRetries               // a turn with more than one attempt
	IndexResends               // a turn that resent (Resends > 0)
	IndexFailures              // a turn whose outcome is failed
	numIndexes
)

var indexNames = [numIndexes]string{"recent", "stalls", "retries", "resends", "failures"}

// Name is the index's name in the store.
func (i Index) Name() string { return indexNames[i] }

// IndexNames are the names of the indexes, in a save's order.
func IndexNames() []string { return append([]string(nil), indexNames[:]...) }

// Match reports whether rec belongs in the index.
func (i Index) Match(rec *record.TurnRecord) bool {
	switch i {
	case IndexRecent:
		return true
	case IndexStalls:
		for _, a := range rec.Attempts {
			if a.TimeoutClock != "" {
				return true
			}
		}
		return false
	case IndexRetries:
		return len(rec.Attempts) > 1
	case IndexResends:
		return rec.Resends > 0
	case IndexFailures:
		return rec.Outcome == record.OutcomeFailed
	}
	return false
}

// Saver makes the op that saves a record (store.Journal.SaveOp): the record
// as JSON, the time its turn is indexed under, and its index entries.
type Saver struct {
	st  *store.Journal
	now func() time.Time // the clock of UpdatedAt, and of an untimed turn's index entry
}

// NewSaver returns the saver of records into st, with the clock now.
func NewSaver(st *store.Journal, now func() time.Time) *Saver { return &Saver{st: st, now: now} }

// SaveOp is a save of rec as a pipeline op (see store.Op), replacing any
// earlier version (last write wins); the stored copy gets UpdatedAt, and
// QueueWait and Latency when they are zero and can be computed. With
// keepFinished it writes nothing over a record whose outcome is final
// (answered, failed, approval_required): an attempt that does not know
// whether its finish reached Redis journals its retry that way.
//
// runner is the number of the attempt's runner (store.StartReads.Runner;
// 0: none, the save writes whatever is stored): the save writes nothing
// over a record that a runner with a higher number saved, one that started
// later. Of two runners of one turn for a moment (a takeover and the
// worker it took the turn from, paused, or Asynq's recovery of it), the
// one that no longer runs the turn thus overwrites nothing of the other's
// until it learns it lost the turn: the record stays the newest runner's,
// finished when it finished.
//
// ix (nil: none) is what the turn knows of its record's index entries: the
// save skips what is surely there already and what surely is not, and ix
// learns what the save wrote once it ran.
func (s *Saver) SaveOp(rec *record.TurnRecord, keepFinished bool, runner int64, ix *Indexed) (store.Op, error) {
	args, err := s.saveArgs(rec, keepFinished, runner, ix)
	if err != nil {
		return nil, err
	}
	wrote := indexedBits(rec)
	var sure *atomic.Uint32
	if ix != nil {
		sure = &ix.sure
	}
	// rec.TaskID, not rec: the caller's copy of its record then stays on its stack
	return s.st.SaveOp(args, rec.TaskID, keepFinished, runner, sure, wrote), nil
}

// Indexed is what one attempt knows of its turn's index entries (and of
// its otid key), as bits of the indexes: maybe, the indexes the record may
// be in (an attempt's saves remove it only from those: a flag that a
// record loses is rare, as they only grow but for the outcome); sure,
// those it is in, and the otid key written, because a save of the record
// with those flags ran (this attempt's, or the earlier one whose record the
// attempt read: the record and its entries are written by one script). A
// later save then skips the index entry and the otid key: a plain turn's
// second save writes only the record. An index entry and the otid key thus
// keep the expiry of the save that wrote them, which is Retention from the
// turn's first save: turns last minutes, Retention days.
type Indexed struct{ maybe, sure atomic.Uint32 }

// matches is the bits of the indexes that rec matches.
func matches(rec *record.TurnRecord) uint32 {
	var m uint32
	for i := range numIndexes {
		if i.Match(rec) {
			m |= 1 << i
		}
	}
	return m
}

// indexedBits is matches, less IndexRecent's bit when the turn's time is
// not known yet: a later save moves its entry to that time.
func indexedBits(rec *record.TurnRecord) uint32 {
	m := matches(rec)
	if _, known := turnTime(rec); !known {
		m &^= 1
	}
	return m
}

// init sets ix to the index state of a record read from the journal (nil
// or without a task id: none yet).
func (ix *Indexed) init(read *record.TurnRecord) {
	var maybe, sure uint32
	if read != nil && read.TaskID != "" {
		maybe, sure = matches(read), indexedBits(read)
	}
	ix.maybe.Store(maybe)
	ix.sure.Store(sure)
}

// saveArgs encodes rec as the command of store.JournalSave; ix: see
// SaveOp.
func (s *Saver) saveArgs(rec *record.TurnRecord, keepFinished bool, runner int64, ix *Indexed) (args []any, err error) {
	if rec == nil || rec.TaskID == "" {
		return nil, errors.New("queue: journal save: record has no task id")
	}
	now := s.now()
	r := *rec
	r.UpdatedAt = now.UTC()
	if r.QueueWait == 0 && !r.EnqueuedAt.IsZero() && !r.FirstStartedAt.IsZero() {
		r.QueueWait = r.FirstStartedAt.Sub(r.EnqueuedAt)
	}
	if r.Latency == 0 && !r.EnqueuedAt.IsZero() && !r.FinishedAt.IsZero() {
		r.Latency = r.FinishedAt.Sub(r.EnqueuedAt)
	}
	b, err := MarshalRecord(&r)
	if err != nil {
		return nil, fmt.Errorf("queue: journal save %s: %w", r.TaskID, err)
	}
	at, known := turnTime(&r)
	score := at.UnixMilli()
	if !known {
		score = now.UnixMilli()
	}
	// Per index: "1" add (or move: ZADD), "0" remove, "-" leave as it is.
	maybe, sure := uint32(1<<numIndexes-1), uint32(0)
	if ix != nil {
		maybe, sure = ix.maybe.Load(), ix.sure.Load()
		ix.maybe.Or(matches(&r))
	}
	otid := r.Otid
	if sure&1 != 0 {
		otid = "" // written with the record's first index entry
	}
	args = s.st.SaveArgs(r.TaskID, r.Otid, otid, b, score, known, keepFinished, runner)
	for i := range numIndexes {
		bit := uint32(1) << i
		switch {
		case i.Match(&r) && sure&bit == 0:
			args = append(args, "1")
		case i.Match(&r):
			args = append(args, "-")
		case maybe&bit != 0:
			args = append(args, "0")
		default:
			args = append(args, "-")
		}
	}
	return append(args, store.IntentsFlag(mayHaveIntents(&r))), nil
}

// mayHaveIntents reports whether the turn may have intents, whose expiry a
// save of r then refreshes with the record's: an attempt journaled its
// intent (SentOtid), or an attempt before this one may have. A first
// attempt's saves before its intent have none to refresh: its intent is
// pushed with an expiry of its own (store.IntentPush), after them. An
// intent pushed whose reply was lost (the attempt ends without SentOtid)
// keeps the expiry of its push, which the record's end save outlives by
// the rest of that attempt; the next attempt's saves refresh it.
func mayHaveIntents(r *record.TurnRecord) bool {
	if len(r.Attempts) > 1 {
		return true
	}
	for _, a := range r.Attempts {
		if a.SentOtid {
			return true
		}
	}
	return false
}

// turnTime is the time a turn is indexed under.
func turnTime(r *record.TurnRecord) (time.Time, bool) {
	switch {
	case !r.EnqueuedAt.IsZero():
		return r.EnqueuedAt, true
	case !r.FirstStartedAt.IsZero():
		return r.FirstStartedAt, true
	case len(r.Attempts) > 0 && !r.Attempts[0].Start.IsZero():
		return r.Attempts[0].Start, true
	}
	return time.Time{}, false
}
