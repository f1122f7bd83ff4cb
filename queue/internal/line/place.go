package line

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// Attempt is what a Place knows of the attempt that holds it.
type Attempt struct {
	Key    string      // ordering key ("" without ordering)
	TaskID string      // the turn's task
	Queue  string      // its Asynq queue
	Runner string      // the Asynq task running the attempt (a takeover's own, else TaskID)
	Task   *asynq.Task // its type and payload (a park enqueues it again)
	Log    *slog.Logger
	// Failed is called when a Redis write failed (the attempt waits for
	// Redis before it ends).
	Failed func()
}

// Place is one attempt's place in its chat's line: the lease it holds
// while it runs, its release and the wake-up of the turn behind it, the
// messages merged into it, and its park when it must wait.
type Place struct {
	l *Lines
	a Attempt

	lease *ordering.Lease // held while the attempt runs (nil without ordering)

	mu          sync.Mutex
	next        string // the head of the line after the release with the last writes (guarded by mu)
	released    bool   // the lease was released with the turn's last writes (ReleaseOps; guarded by mu)
	releaseSeen bool   // Release ran: a later release with the last writes wakes the next turn itself (guarded by mu)

	followers    []Follower // messages merged into this turn
	newFollowers []string   // taken by this attempt
}

// Place returns the place of attempt a.
func (l *Lines) Place(a Attempt) *Place {
	if a.Failed == nil {
		a.Failed = func() {}
	}
	return &Place{l: l, a: a}
}

// Key is the attempt's ordering key ("" without ordering).
func (p *Place) Key() string {
	if p == nil {
		return ""
	}
	return p.a.Key
}

// Lease is the lease the attempt holds, nil while none (or without
// ordering).
func (p *Place) Lease() *ordering.Lease {
	if p == nil {
		return nil
	}
	return p.lease
}

// Alive is the dead-head check of the attempt's acquire: Asynq's view of
// the attempt's queue, wrapped by wrap (the takeover's view), and a parked
// task counts as alive.
func (p *Place) Alive(wrap func(ordering.AliveFunc) ordering.AliveFunc) ordering.AliveFunc {
	return p.l.AliveOrParked(wrap(ordering.InspectorAlive(p.l.insp, p.a.Queue)))
}

// JoinFront puts the attempt's turn at the front of its line (an approval
// answer goes before the messages that wait for it).
func (p *Place) JoinFront(ctx context.Context) error {
	_, err := p.l.cfg.Seq.JoinFront(ctx, p.a.Key, p.a.TaskID)
	return err
}

// AcquireIn queues the acquire of the line on pipe (a round trip shared
// with the start's reads); Take reads its answer.
func (p *Place) AcquireIn(ctx context.Context, pipe redis.Pipeliner) (*ordering.Acquiring, error) {
	return p.l.cfg.Seq.AcquireIn(ctx, pipe, p.a.Key, p.a.TaskID, p.l.cfg.WorkerID)
}

// Take reads the answer of AcquireIn's acquire: the lease is held when err
// is nil; first says it was taken by that round trip (not after dead heads
// were removed).
func (p *Place) Take(ctx context.Context, a *ordering.Acquiring, alive ordering.AliveFunc) (first bool, err error) {
	lease, err := a.Lease(ctx, alive)
	if err != nil {
		return false, err
	}
	p.lease = lease
	return a.First(), nil
}

// Acquire takes the line in a round trip of its own.
func (p *Place) Acquire(ctx context.Context, alive ordering.AliveFunc) error {
	lease, err := p.l.cfg.Seq.Acquire(ctx, p.a.Key, p.a.TaskID, p.l.cfg.WorkerID, alive)
	if err != nil {
		return err
	}
	p.lease = lease
	return nil
}

// Context is ctx ended when the lease is lost.
func (p *Place) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	return p.lease.Context(ctx)
}

// WakeAfterDeadHeads wakes the new head of the line when this attempt's
// acquire (err) removed dead heads before it without becoming the head
// itself: the new head waits for a turn that will never end (scheduled up
// to 10 × Ordering.WaitCheck ahead, or put back), and nobody else wakes it.
func (p *Place) WakeAfterDeadHeads(ctx context.Context, err error) {
	var nyt *ordering.NotYourTurnError
	if !errors.As(err, &nyt) || nyt.RemovedDead == 0 || nyt.HeadHeld || nyt.Head == "" || nyt.Head == p.a.TaskID {
		return
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	p.l.Wake(rctx, p.a.Log, "the new head of the line", p.a.Queue, p.a.Key, nyt.Head)
}

// Release ends the ordered attempt, unless its last writes did
// (ReleaseOps): the key is freed; when the turn is over (done) it leaves
// the line and the next one (and merged tasks put back to wait) are woken.
// The error is the release's (the attempt logs it).
func (p *Place) Release(ctx context.Context, done bool) error {
	p.mu.Lock()
	released, next := p.released, p.next
	p.releaseSeen = true
	p.mu.Unlock()
	if released {
		p.wake(ctx, next) // released with the turn's last writes
		return nil
	}
	if p.lease == nil {
		return nil // (never acquired)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	next, err := p.lease.Release(rctx, done)
	if err != nil {
		p.a.Failed()
		p.l.releaseLater(p, done)
		return err
	}
	if done {
		p.wake(ctx, next)
	}
	return nil
}

// wake moves the turn now at the head of the line (next) and the merged
// tasks of this turn to pending, once the finished turn left the line.
func (p *Place) wake(ctx context.Context, next string) {
	if next == "" && len(p.newFollowers) == 0 {
		return // nobody to wake (the usual case): no timer to make
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if next != "" {
		p.l.Wake(rctx, p.a.Log, "the next turn", p.a.Queue, p.a.Key, next)
	}
	for _, id := range p.newFollowers {
		// Merged tasks wait (scheduled, or put back): let them end now.
		p.l.Wake(rctx, p.a.Log, "a merged turn", p.a.Queue, p.a.Key, id)
	}
}

// ReleaseOps release the conversation of a finished turn with its last
// writes (the journal's finished record): one round trip. They are used
// when the ordering keys are on the writer's Redis (the worker made both
// clients from Asynq's connection). If the release does not happen there,
// Release releases as usual (releasing twice is harmless).
//
// after, when not "", is the marker of the turn's final event sent in the
// same round trip: the release happens only if the marker exists then, so
// that a final event whose write failed never lets go of its turn's place
// (Release then releases as for any attempt that retries). On a Redis that
// is not one server the marker and the line need not share a slot, and
// the release is left to Release.
func (p *Place) ReleaseOps(after string) []store.Op {
	if p == nil || p.lease == nil || !p.l.cfg.ReleaseWithWrites {
		return nil
	}
	if after != "" && !p.l.cfg.Single {
		return nil
	}
	cmd, next := p.lease.ReleaseCmdAfter(true, after)
	return []store.Op{func(ctx context.Context, pipe redis.Pipeliner, sha bool) func() error {
		c := cmd(ctx, sha)
		_ = pipe.Process(ctx, c) // the error is c's, read below
		return func() error { return p.readRelease(c, next) }
	}}
}

// readRelease reads the reply of ReleaseOps' release.
func (p *Place) readRelease(c *redis.Cmd, next func(*redis.Cmd) (string, error)) error {
	n, err := next(c)
	if store.IsNoScript(err) {
		return err // store.Run sends it again
	}
	if errors.Is(err, ordering.ErrNotReleased) {
		return nil // the final event is not written: Release releases (not done)
	}
	if err == nil {
		p.mu.Lock() // the writer's goroutine: the attempt may have stopped waiting
		p.released, p.next = true, n
		late := p.releaseSeen
		p.mu.Unlock()
		if late {
			// Release went on without this release (the attempt stopped
			// waiting for these writes): the next turn is woken here.
			go p.wake(context.Background(), n)
		}
	}
	return nil
}

// Leave takes the attempt's turn, which will not run, out of its line and
// wakes the turn behind it (Waker.Leave).
func (p *Place) Leave(ctx context.Context) error {
	return p.l.Waker().Leave(ctx, p.a.Queue, p.a.Key, p.a.TaskID)
}

// Park ends the attempt of a turn that waits behind behind (a task id, or
// "approval request <id>"): the parking record, then RevokeTask: it
// returns ErrParked, which the handler returns (the attempt journals the
// wait). It returns nil when the turn could not be parked (the caller puts
// it back as before).
func (p *Place) Park(ctx context.Context, behind, reason string) error {
	if p.a.Runner != p.a.TaskID {
		// A takeover runs the turn under a task of its own while the
		// original task may still be active in Asynq: the turn's id cannot
		// be enqueued again now. It is put back, as without parking (rare:
		// a taken-over turn held its line).
		return nil
	}
	ok, err := p.l.park(ctx, p.a.Log, p.a.Task, p.a.Queue, p.a.TaskID, behind, reason, p.a.Key)
	if err != nil {
		p.a.Failed()
		p.a.Log.Warn("could not park the waiting turn: it is put back", "error", err.Error())
		return nil
	}
	if !ok {
		return nil
	}
	return ErrParked
}

// Ahead is the turn ahead that an attempt which is not its line's turn
// waits for.
type Ahead struct {
	Head     string // its task id
	Reason   string // the wait, for people
	Position int    // the attempt's position in the line
}

// ParkBehindTurn parks an attempt that is not its conversation's turn
// (err: a *ordering.NotYourTurnError) and looks at the line again once
// parked (WakeIfFreed). It returns ErrParked and what it waits for, which
// the attempt journals; nil when it could not park (it is put back as
// before).
func (p *Place) ParkBehindTurn(ctx context.Context, err error) (Ahead, error) {
	var nyt *ordering.NotYourTurnError
	if !errors.As(err, &nyt) || nyt.Head == "" || nyt.Head == p.a.TaskID {
		return Ahead{}, nil
	}
	state := "waiting"
	if nyt.HeadHeld {
		state = "running"
	}
	a := Ahead{Head: nyt.Head, Position: nyt.Position,
		Reason: fmt.Sprintf("waiting for the turn ahead: %s (%s; position %d in the line)", nyt.Head, state, nyt.Position)}
	perr := p.Park(ctx, a.Head, a.Reason)
	if perr == nil {
		return Ahead{}, nil
	}
	if err := p.l.Waker().WakeIfFreed(ctx, p.a.Key, p.a.TaskID); err != nil {
		p.a.Log.Debug("could not look at the line again after the park", "error", err.Error())
	}
	return a, perr
}

// NoteApprovalWaiter notes the parked attempt's turn as a waiter of
// approval request requestTaskID, which the answer (or the expiry) wakes
// (Lines.WakeApprovalWaiters).
func (p *Place) NoteApprovalWaiter(ctx context.Context, requestTaskID string) error {
	return p.l.st.AddWaiter(ctx, requestTaskID, p.a.TaskID, p.a.Queue, p.a.Key)
}

// WakeParked marks the parked attempt's record woken: its re-enqueue makes
// it pending (what it waited for ended meanwhile).
func (p *Place) WakeParked(ctx context.Context) error {
	_, err := p.l.st.Wake(ctx, p.a.TaskID)
	return err
}
