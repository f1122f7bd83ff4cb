// Package fence is one attempt's side of takeover that needs no registry: which Asynq
// task runs the attempt, and whether the attempt was taken over from this worker
// (fenced: it writes nothing more) or left the registry with its last writes (gone).
//
// The takeover beat's goroutine, the writer and the attempt all reach a Runner: its
// flags are safe for concurrent use; ID, Retried and From are set before it is shared.
package fence

import (
	"context"
	"sync/atomic"
)

// Runner is one attempt's runner of its turn.
type Runner struct {
	ID      string // the Asynq task running this attempt (the turn's task, or a takeover's)
	Retried int    // the runner's own retry count (Asynq's)
	From    string // a takeover: the dead worker instance whose turn it continues

	stop   context.CancelCauseFunc // ends the attempt's context (Fence)
	fenced atomic.Bool
	gone   atomic.Bool
}

// OnFence sets what Fence calls: the end of the attempt's context.
func (r *Runner) OnFence(stop context.CancelCauseFunc) { r.stop = stop }

// Fence notes that the turn was taken over and ends the attempt's context with cause.
func (r *Runner) Fence(cause error) {
	r.fenced.Store(true)
	if r.stop != nil {
		r.stop(cause)
	}
}

// Fenced notes that the turn was taken over, without ending the attempt's context (the
// attempt found out itself and stops on its own).
func (r *Runner) Fenced() { r.fenced.Store(true) }

// IsFenced reports whether the turn was taken over from this worker.
func (r *Runner) IsFenced() bool { return r.fenced.Load() }

// Gone notes that the turn left the registry with its last writes.
func (r *Runner) Gone() { r.gone.Store(true) }

// IsGone reports whether the turn left the registry with its last writes.
func (r *Runner) IsGone() bool { return r.gone.Load() }
