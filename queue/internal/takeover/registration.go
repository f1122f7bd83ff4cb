package takeover

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// AttemptObserver is told how an attempt ended (queue's Observer, as the attempt tells it).
type AttemptObserver interface {
	AttemptFinished(queue, result string, d time.Duration)
}

// Attempt is what a Registration knows of its attempt.
type Attempt struct {
	TaskID, Queue string
	Runner        *fence.Runner // the attempt's runner: fenced here, read by the attempt
	Log           *slog.Logger  // the attempt's log (task id, otid, run id)
	Obs           AttemptObserver
	Start         time.Time
	Ctx           context.Context // the attempt's context (its end does not stop an unregister)
}

// Registration is one attempt's side of the registry: under which epoch it is registered,
// and the registry's look at whether its turn was taken over. Made by Registry.Attempt; its
// methods are safe for concurrent use with the registry's beats.
type Registration struct {
	tk *Registry // nil: takeover off
	at Attempt
	rn *fence.Runner

	// Set by Register (before the registration is shared with the beats).
	epoch  *epoch // the registration the turn is under (nil: not registered)
	entry  []byte // the turn's entry in the registry (claim.Entry)
	number int64  // the runner's number (store.StartReads.Runner)
}

// Attempt returns the registration of an attempt, not registered yet. On a nil Registry
// (takeover off) it registers nothing and is never taken over.
func (tk *Registry) Attempt(a Attempt) *Registration {
	return &Registration{tk: tk, at: a, rn: a.Runner}
}

// running reports whether r is a running turn of e's: registered under it, not ended by its
// last writes, not fenced.
func (r *Registration) running(e *epoch) bool {
	return r.epoch == e && !r.rn.IsGone() && !r.rn.IsFenced()
}

// Register notes in the registry that this worker runs the turn (after it got its
// conversation, when ordered, and its start read numbered its runner: number). entry is the
// turn's entry; its Queue and Runner are the attempt's. It returns the write, for the
// attempt's next round trip; nil when nothing registers (takeover off, not started, or
// registered already). A failed write is logged by the attempt: the turn is then only
// recovered by Asynq's lease, as without takeover.
func (r *Registration) Register(entry claim.Entry, number int64) store.Op {
	if r == nil || !r.tk.Running() || r.epoch != nil {
		return nil
	}
	tk := r.tk
	entry.Queue, entry.Runner = r.at.Queue, r.rn.ID
	b, err := json.Marshal(entry)
	if err != nil {
		return nil
	}
	tk.mu.Lock()
	e := tk.epoch
	r.epoch, r.entry, r.number = e, b, number
	tk.turns[r] = struct{}{}
	tk.pending[r] = struct{}{}
	tk.mu.Unlock()
	// With the attempt's next writes (its journal record, the accepted event), at the
	// latest with the intent before its send: a worker that dies before has sent nothing,
	// and Asynq's recovery runs the turn. From then on this runner holds the turn: one that
	// held it before stops at its worker's next beat.
	return tk.st.RegisterOp(r.registration(e), func() {
		tk.mu.Lock()
		delete(tk.pending, r)
		tk.mu.Unlock()
	}, func() {
		// A runner of the turn that started after this one holds it (and writes its
		// record): this one is the stale one.
		r.at.Log.Warn("a runner of the turn that started later holds it: this attempt stops and writes nothing more", "runner", r.rn.ID)
		r.rn.Fence(ErrTakenOver)
	})
}

// registration is the turn's registration under e.
func (r *Registration) registration(e *epoch) store.Registration {
	return store.Registration{Instance: e.id, TaskID: r.at.TaskID, Runner: r.rn.ID, Entry: r.entry,
		HolderTTL: claim.MarkerTTL, LostTTL: claim.TombstoneTTL, After: r.tk.after, Number: r.number}
}

// UnregisterOps take the turn out of the registry with its last writes (queue's
// deliverAtOnce), so that Unregister has nothing left to do.
func (r *Registration) UnregisterOps() []store.Op {
	if r == nil || r.epoch == nil {
		return nil
	}
	return []store.Op{r.tk.st.UnregisterOp(r.epoch.id, r.at.TaskID, r.rn.ID, func() { r.rn.Gone() })}
}

// Unregister takes the turn out of the registry when its attempt ends.
func (r *Registration) Unregister() {
	if r == nil || r.tk == nil || r.epoch == nil {
		return
	}
	tk := r.tk
	tk.mu.Lock()
	delete(tk.turns, r)
	delete(tk.pending, r)
	tk.mu.Unlock()
	// A beat writing the running turns back has this turn in its list, or no longer: after
	// it, rewritten says whether it wrote this one back.
	tk.reregMu.Lock()
	tk.mu.Lock()
	_, again := tk.rewritten[r]
	delete(tk.rewritten, r)
	tk.mu.Unlock()
	tk.reregMu.Unlock()
	if r.epoch.dead.Load() || r.rn.IsGone() && !again {
		return // claimed (the hash is gone, and the turn writes nothing), or done with its last writes
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.at.Ctx), 2*time.Second)
	defer cancel()
	if err := tk.st.Unregister(ctx, r.epoch.id, r.at.TaskID, r.rn.ID); err != nil {
		r.at.Log.Debug("could not unregister the turn", "error", err.Error())
	}
}

// TakenOver reports whether the turn was taken over from this worker. When the worker's last
// good beat is older than half of TakeoverAfter (it was paused, or cut off from Redis), it
// asks Redis whether it was tombstoned. A failed check counts as not taken over (the write
// it guards fails too, or goes through when Redis is back, and the tombstone is checked then).
func (r *Registration) TakenOver(ctx context.Context) bool {
	if r == nil {
		return false
	}
	if r.rn.IsFenced() {
		return true
	}
	tk, e := r.tk, r.epoch
	if tk == nil || e == nil {
		return false
	}
	if e.dead.Load() {
		r.rn.Fenced()
		return true
	}
	if tk.now()-time.Duration(e.lastOK.Load()) <= tk.after/2 {
		return false
	}
	if !tk.confirm(ctx, e) {
		return r.rn.IsFenced() // (another runner may have taken this turn: confirm's beat stops it)
	}
	r.rn.Fenced()
	return true
}

// FencedNow is TakenOver under the attempt's context, for the attempt's writer: the writes
// of a taken-over turn are dropped.
func (r *Registration) FencedNow() bool { return r.TakenOver(r.at.Ctx) }

// EndTakenOver ends an attempt whose turn was taken over: it writes nothing (no event, no
// journal, no release of the line), and says so in the attempt's log and to its observer.
func (r *Registration) EndTakenOver() error {
	if r == nil {
		return nil
	}
	r.at.Log.Warn("turn taken over by another worker: this attempt stops and writes nothing")
	r.at.Obs.AttemptFinished(r.at.Queue, "taken_over", time.Since(r.at.Start))
	return nil
}

// ContinuedElsewhere reports whether this runner of the turn is not its newest one: Asynq
// recovered a task (or a takeover task) whose turn a takeover continues. It reads the marker
// only for a task that Asynq ran before (a first attempt was never taken over).
func (r *Registration) ContinuedElsewhere(ctx context.Context) bool {
	if r == nil || r.tk == nil {
		return false
	}
	tk := r.tk
	if r.rn.From != "" {
		// A takeover does not start while another runner of the turn is alive (Asynq
		// recovered the turn before the dead worker was claimed, or another takeover runs
		// it).
		me := tk.current().id
		if h, live := claim.LiveHolder(ctx, tk.st, r.at.TaskID, tk.after, tk.log); live && (h.Instance != me || h.Runner != r.rn.ID) {
			r.at.Log.Info("turn run by another live runner: this takeover ends", "holder", h.Instance, "holder_runner", h.Runner,
				"runner", r.rn.ID)
			return true
		}
	}
	if r.rn.Retried == 0 {
		return false
	}
	by, err := tk.st.TakenOverBy(ctx, r.at.TaskID)
	if err != nil || by == "" || by == r.rn.ID {
		return false
	}
	r.at.Log.Info("turn continued by another runner: this attempt ends", "continued_by", by, "runner", r.rn.ID)
	return true
}
