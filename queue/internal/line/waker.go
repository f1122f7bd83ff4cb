package line

import (
	"context"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// A waiting turn is woken by whatever frees it: the end of the turn ahead
// of it (release), the turn ahead leaving its line without running (a
// cancel, a give-up: Leave), the answer to its chat's approval request.
// No wake-up is lost to a turn that is parking at that moment (its attempt
// still active, its parking record not written yet, for however long that
// takes): the waker marks the record woken when it exists, and the parker
// looks at what it waits for again once its record is written
// (WakeIfFreed, the approval's park), so one of the two sees the other.

// wakeWait bounds how long Wake looks for a task that is between two
// states.
const wakeWait = time.Second

// Waker wakes waiting turns; the worker (Lines.Waker) and the client (a
// cancel) each have one.
type Waker struct {
	Park *store.Parking      // nil: no parking records (a client without Replies)
	Insp *asynq.Inspector    // Asynq's tasks
	Seq  *ordering.Sequencer // nil: no ordering
}

// Wake makes taskID, which waits in key's line ("": without ordering), run
// now: a parked task has its record marked woken (its re-enqueue makes it
// pending); a scheduled or retry task is moved to pending. A task between
// two states (its attempt still parking, or being enqueued again) is
// looked at again for up to wakeWait. An active task under ordering is
// looked at again unless it holds key's line (its attempt may be put back
// into the retry set); without ordering it is left alone. A parking
// attempt sees for itself what freed it (WakeIfFreed, the approval's
// park), so giving up after wakeWait loses no wake-up of a parked turn.
func (k Waker) Wake(ctx context.Context, queue, key, taskID string) error {
	w := ordering.Waking{Wait: wakeWait, MissingIsBetween: true, Seq: k.Seq}
	if k.Park != nil {
		w.Parked = k.Park.Wake
	}
	return w.Wake(ctx, k.Insp, queue, key, taskID)
}

// Leave takes taskID, which will not run (cancelled, given up, never
// enqueued), out of key's line and wakes the turn that heads it now when
// taskID headed it (ordering.Sequencer.Leave: one script, so that a turn
// ahead ending at the same moment cannot leave the new head unwoken).
func (k Waker) Leave(ctx context.Context, queue, key, taskID string) error {
	next, err := k.Seq.Leave(ctx, key, taskID)
	if err != nil {
		return err
	}
	return k.Wake(ctx, queue, key, next)
}

// WakeIfFreed is the parker's look after it wrote the parking record of
// taskID, which waits for its turn in key's line: when the line is free
// for it now (it heads the line, nobody holds it), the turn ahead left
// meanwhile and its wake-up may have missed the record (it gives up on an
// attempt still active after wakeWait): the record is marked woken, so
// its re-enqueue makes it pending.
func (k Waker) WakeIfFreed(ctx context.Context, key, taskID string) error {
	head, err := k.Seq.Head(ctx, key)
	if err != nil || head != taskID {
		return err
	}
	held, _, err := k.Seq.Holder(ctx, key)
	if err != nil || held != "" {
		return err
	}
	_, err = k.Park.Wake(ctx, taskID)
	return err
}
