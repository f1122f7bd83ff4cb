package progress

import "github.com/lettaq/lettaq/queue/internal/store"

// item is one write a turn queued: an event, or other writes (op), or
// neither (a bare barrier: Flush).
type item struct {
	ev   *Event
	op   store.Op
	bar  *barrier // set when the pusher waits for this item
	save bool     // a journal save of the whole record (op, or rec: PushSave)
	rec  Saver    // set for a PushSave: its SaveOp runs when the writer takes it
}

// Event is its event, for store.Trip.
func (it item) Event() (*Event, bool) { return it.ev, it.ev != nil }

// Op is its other writes, for store.Trip: a queued save is encoded when
// the round trip reaches it (see PushSave).
func (it item) Op() (store.Op, error) {
	if it.op == nil && it.rec != nil {
		return it.rec.SaveOp()
	}
	return it.op, nil
}

// Saver makes the journal save of a turn's record as it is when called.
type Saver interface {
	SaveOp() (store.Op, error)
}

// EncodedSave is a save encoded when it was pushed (what a turn pushes:
// see PushSave).
type EncodedSave struct {
	Op  store.Op
	Err error
}

// SaveOp is the encoded save.
func (s EncodedSave) SaveOp() (store.Op, error) { return s.Op, s.Err }

// barrier is what a Do call waits for: its last item's batch ran.
type barrier struct {
	done chan error // buffered: the writer never blocks on a caller that gave up
	err  error      // the first error of the call's items
	n    int        // items not yet written
}
