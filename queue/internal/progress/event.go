package progress

import (
	"sync/atomic"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Complete validates an event of conversation c and completes it (its
// parts, a truncated tool return, its time: queue's Replies does), and
// returns the stream entry's time and data fields.
type Complete func(c record.Conversation, ev record.ReplyEvent) (_ record.ReplyEvent, at, data string, err error)

// Event is an event encoded for store.ReplyEmitMany, and where its result
// goes.
type Event struct {
	typ  record.EventType
	head *store.Head // keys and the fields before time, boxed
	// The entry's time and data fields, boxed for the command's arguments.
	at, data any
	// written, id (the entry's) and seq are set once the script ran.
	written bool
	// passing: a phase that says only what the turn is doing now (no
	// approval): the turn's next event replaces it while it waits (see
	// Queue.supersedeLocked).
	passing bool
	id      string
	seq     int64
	// writeErr: the event's own commands failed in the script call that
	// wrote the others (store.EmitManyOp); the writer reports it as the
	// event's error.
	writeErr error
	// err: for an event a caller waits for (Queue.Do), how its round trip
	// ended (read it only when Do did not return ErrNotWaited).
	err error
	// busy: a queue's reusable event (Queue.beat) is queued or being
	// written. Guarded by the writer's mu.
	busy bool
	// The event's write key (see store.ReplyEmitMany): its attempt's
	// token and its number there (set when it is queued, in queue order),
	// and the attempt's seq floor, raised by each event written.
	wtok  any
	wn    int64
	floor *seqFloor
}

// Written reports whether the event was written (read it once Do returned
// without ErrNotWaited, or in DoThen's then).
func (pe *Event) Written() bool { return pe.written }

// Seq is the written event's seq.
func (pe *Event) Seq() int64 { return pe.seq }

// Err is how the round trip that carried the event ended for it: nil, a
// Redis error, or the fence's cause when the turn was taken over.
func (pe *Event) Err() error { return pe.err }

// seqFloor is the highest seq an attempt's writer was told for its turn:
// its next event never takes a lower one, even after Redis lost its last
// writes (see store.ReplyEmitMany).
type seqFloor struct{ v atomic.Int64 }

// raise makes the floor at least seq.
func (f *seqFloor) raise(seq int64) {
	for {
		cur := f.v.Load()
		if seq <= cur || f.v.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// Encoded is pe for store.EmitManyOp.
func (pe *Event) Encoded() (h *store.Head, typ, at, data any) {
	return pe.head, typeArg(pe.typ), pe.at, pe.data
}

// Emitted takes pe's result from store.EmitManyOp: an event whose own
// commands failed gets its writeErr.
func (pe *Event) Emitted(ok int64, id string, seq int64, msg string) {
	pe.written, pe.writeErr = ok == 1, nil
	switch {
	case pe.written:
		pe.id, pe.seq = id, seq
		if pe.floor != nil {
			pe.floor.raise(seq)
		}
	case ok == -1:
		pe.writeErr = &eventWriteError{typ: pe.typ, msg: msg}
	}
}

// WriteKey is pe's write key, for store.EmitManyOp.
func (pe *Event) WriteKey() (token any, n, floor int64) {
	if pe.floor != nil {
		floor = pe.floor.v.Load()
	}
	return pe.wtok, pe.wn, floor
}

// WriteErr is pe's own error in a call that wrote the others, for
// store.Trip.
func (pe *Event) WriteErr() error { return pe.writeErr }

// typeArg is t boxed, without an allocation for the known types.
func typeArg(t record.EventType) any {
	switch t {
	case record.EventPhase:
		return string(record.EventPhase)
	case record.EventAnswerDelta:
		return string(record.EventAnswerDelta)
	case record.EventTool:
		return string(record.EventTool)
	case record.EventAccepted:
		return string(record.EventAccepted)
	case record.EventAnswer:
		return string(record.EventAnswer)
	case record.EventApprovalRequired:
		return string(record.EventApprovalRequired)
	case record.EventError:
		return string(record.EventError)
	}
	return string(t)
}

// Encode encodes ev (completed by complete) into pe for st's streams, with
// the head *last when it fits (else a new one, made from *last's boxes, and
// stored in *last when last is not nil). One last serves one conversation.
// A marker makes the event written once per marker key (see
// store.ReplyEmitMany).
func Encode(st *store.Replies, complete Complete, pe *Event, last **store.Head, c record.Conversation, ev record.ReplyEvent, marker string) error {
	ev, at, data, err := complete(c, ev)
	if err != nil {
		return err
	}
	var h *store.Head
	if last != nil && (*last).Fits(ev.TaskID, ev.Otid, ev.RunID, ev.MessageID, marker) {
		h = *last
	} else {
		var prev *store.Head
		if last != nil {
			prev = *last
		}
		h = st.NewHead(c.Integration, c.ChatID, ev.TaskID, ev.Otid, ev.RunID, ev.MessageID, marker, prev)
		if last != nil {
			*last = h
		}
	}
	// (busy is the queue's, under the writer's lock.)
	pe.typ, pe.head, pe.at, pe.data = ev.Type, h, at, data
	pe.passing = ev.Type == record.EventPhase && ev.Approval == nil && ev.Phase != record.PhaseAwaitingApproval
	pe.written, pe.id, pe.seq, pe.err, pe.writeErr = false, "", 0, nil, nil
	return nil
}

// eventWriteError is an event's own failure in a script call that wrote the
// others (see store.ReplyEmitMany): the event is surely not written.
type eventWriteError struct {
	typ record.EventType
	msg string // Redis's error
}

func (e *eventWriteError) Error() string { return "queue: emit " + string(e.typ) + " event: " + e.msg }
