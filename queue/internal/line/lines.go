package line

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/service"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// Waiting is a state, not a retry. An attempt that finds it
// must wait, because it is not its turn in its conversation's line
// (acquire's NotYourTurn) or its chat's approval request is open (the
// approval gate), parks: it writes a parking record (store.Parking) and
// ends its Asynq task with asynq.RevokeTask (deleted: not retried, not
// archived, no retry used). Right after, the worker enqueues the task again
// with the same id as an Asynq scheduled task WaitCheck ahead (the safety
// net: in asynqmon it reads as scheduled, far ahead), with the retries it
// had left (ParkedOf), and deletes the record. The event that frees it
// wakes it (Waker.Wake): the turn that frees the line, or the answer (or
// expiry) of the approval request, which wakes the waiters noted under the
// request (Place.NoteApprovalWaiter, Lines.WakeApprovalWaiters). A
// scheduled task is moved to pending; a parked one, momentarily in no
// Asynq queue, has its record marked woken, and its re-enqueue makes it
// pending. A sweeper on every worker re-enqueues the records a worker left
// behind (it died between the revoke and the re-enqueue). Nothing adds an
// attempt to the journal: the record gets one Wait per thing waited
// behind (the attempt writes it).
//
// Parking does not need ordering: without it (Ordering.Off) there is no
// line and no NotYourTurn, but a message behind its chat's approval
// request parks the same way; Lines then has an Inspector of its own, and
// the answer wakes every waiter of the request (with ordering the one in
// the answer's own line is woken by the answer turn's release).

// Defaults of the parking.
const (
	// DefaultSweepEvery: how often a worker looks for parking records left
	// behind.
	DefaultSweepEvery = 30 * time.Second
	// sweepAge: a record younger than this is its worker's business.
	sweepAge = 5 * time.Second
	// reenqueueWait bounds how long the re-enqueue waits for Asynq to
	// delete the revoked task (the sweeper does it after that).
	reenqueueWait = 10 * time.Second
)

// ErrParked is what the handler of a parked attempt returns.
var ErrParked = fmt.Errorf("lettaq: the turn waits (parked): %w", asynq.RevokeTask)

// Config is what Lines is made of.
type Config struct {
	Parking store.Parking      // the parking records (on the reply streams' Redis)
	Conn    asynq.RedisConnOpt // what the re-enqueues' Asynq client is made from
	// Seq is the worker's sequencer; nil without ordering.
	Seq *ordering.Sequencer
	// Insp is the orderer's Inspector; nil without ordering: Lines makes
	// one of its own, closed with it.
	Insp     *asynq.Inspector
	WorkerID string
	Log      *slog.Logger
	// Recheck is the safety net of a parked turn: Ordering.WaitCheck.
	Recheck    time.Duration
	SweepEvery time.Duration // 0: DefaultSweepEvery
	// Coalesce reports whether the waiting messages of an integration
	// are merged into the turn ahead of them; MaxCoalesce bounds how many.
	Coalesce    func(integration string) bool
	MaxCoalesce int
	// Decode reads a merged message's task payload.
	Decode func(payload []byte) (Follower, error)
	// ReleaseWithWrites: the sequencer is on the Redis of the turn's last
	// writes, so that its release can ride with them (Place.ReleaseOps);
	// Single: that Redis is one server (a release after a marker).
	ReleaseWithWrites, Single bool
	// Finished reports whether the journal says the turn taskID is over
	// (the sweep does not enqueue it again).
	Finished func(ctx context.Context, taskID string) bool
}

// Lines is the worker's side of its chats' lines: its attempts' places,
// parking with or without ordering, the re-enqueues and the sweep.
type Lines struct {
	cfg      Config
	st       store.Parking
	insp     *asynq.Inspector
	ownsInsp bool

	acOnce sync.Once
	ac     *asynq.Client

	// AfterRevoke, when set (tests), is called instead of the re-enqueue
	// that follows a park: a worker that dies there.
	AfterRevoke func(p store.Parked)
	sweeps      atomic.Int64 // re-enqueues done by the sweeper (tests)

	pending   sync.WaitGroup // re-enqueues and wake-ups tried again in flight (drain)
	closed    chan struct{}  // closed by close: re-enqueues in flight give up (the sweeper does them)
	closeOnce sync.Once
}

// New returns the worker's Lines.
func New(cfg Config) *Lines {
	if cfg.SweepEvery <= 0 {
		cfg.SweepEvery = DefaultSweepEvery
	}
	l := &Lines{cfg: cfg, st: cfg.Parking, insp: cfg.Insp, closed: make(chan struct{})}
	if l.insp == nil {
		l.insp, l.ownsInsp = asynq.NewInspector(cfg.Conn), true
	}
	return l
}

// Parking is the parking records.
func (l *Lines) Parking() *store.Parking { return &l.st }

// Recheck is how far ahead a parked turn is scheduled (the safety net).
func (l *Lines) Recheck() time.Duration { return l.cfg.Recheck }

// Sweeps is how many parked turns the sweeper enqueued again.
func (l *Lines) Sweeps() int64 { return l.sweeps.Load() }

func (l *Lines) client() *asynq.Client {
	l.acOnce.Do(func() { l.ac = asynq.NewClient(l.cfg.Conn) })
	return l.ac
}

// Drain waits up to d for the re-enqueues and the wake-ups tried again in
// flight (a worker shutting down: the handlers returned, Asynq deletes
// their revoked tasks).
func (l *Lines) Drain(d time.Duration) {
	if l == nil {
		return
	}
	done := make(chan struct{})
	go func() { l.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// Close gives up the re-enqueues in flight (the sweepers do them) and
// closes what Lines made.
func (l *Lines) Close() {
	if l == nil {
		return
	}
	l.closeOnce.Do(func() { close(l.closed) })
	l.Drain(time.Second)
	if l.ac != nil {
		_ = l.ac.Close()
	}
	if l.ownsInsp {
		_ = l.insp.Close()
	}
}

// Waker is the worker's waker.
func (l *Lines) Waker() Waker { return Waker{Park: &l.st, Insp: l.insp, Seq: l.cfg.Seq} }

// WakeTask is the worker's waker's Wake.
func (l *Lines) WakeTask(ctx context.Context, queue, key, taskID string) error {
	return l.Waker().Wake(ctx, queue, key, taskID)
}

// park writes the parking record of the active task taskID of queue
// (task: its type and payload) that waits behind behind on line key, then
// enqueues it again once Asynq deleted it. It returns false when the task
// could not be read (the attempt is put back, as without parking), and
// the store's error when the record could not be written.
func (l *Lines) park(ctx context.Context, log *slog.Logger, task *asynq.Task, queue, taskID, behind, reason, key string) (bool, error) {
	info, err := l.insp.GetTaskInfo(queue, taskID)
	if err != nil {
		log.Debug("could not read the task to park it: it is put back", "error", err.Error())
		return false, nil
	}
	p := ParkedOf(info, task, behind, reason, key, l.cfg.WorkerID)
	if err := l.st.Park(ctx, p); err != nil {
		return false, err
	}
	if l.AfterRevoke != nil {
		go l.AfterRevoke(p)
	} else {
		l.pending.Add(1)
		go func() {
			defer l.pending.Done()
			l.reenqueueAfterRevoke(p)
		}()
	}
	return true, nil
}

// ParkedOf is the parking record of the active task info (task: its type
// and payload) that waits behind behind on line key. The task is enqueued
// again with the retries it has left (a new Asynq task starts at Retried
// 0): info.MaxRetry − info.Retried, at least 1, the one TaskMaxRetry keeps
// for put-backs (a takeover task gets the same).
func ParkedOf(info *asynq.TaskInfo, task *asynq.Task, behind, reason, key, workerID string) store.Parked {
	now := time.Now()
	return store.Parked{TaskID: info.ID, Type: task.Type(), Payload: task.Payload(), Queue: info.Queue,
		MaxRetry: max(info.MaxRetry-info.Retried, 1), Timeout: info.Timeout, Deadline: info.Deadline, Retention: info.Retention,
		Behind: behind, Reason: reason, Key: key, Since: now,
		Gen: strconv.FormatInt(now.UnixNano(), 36) + ":" + workerID}
}

// reenqueueAfterRevoke waits for Asynq to delete the revoked task p, then
// enqueues it again (Enqueue).
func (l *Lines) reenqueueAfterRevoke(p store.Parked) {
	ctx, cancel := context.WithTimeout(context.Background(), reenqueueWait+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(reenqueueWait)
	backoff := 2 * time.Millisecond
	for {
		info, err := l.insp.GetTaskInfo(p.Queue, p.TaskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound):
			if err := l.Enqueue(ctx, p); err != nil {
				l.cfg.Log.Warn("could not enqueue the waiting turn again: the sweeper will", "task_id", p.TaskID, "error", err.Error())
			}
			return
		case err == nil && info.State != asynq.TaskStateActive:
			// Enqueued again by someone else (the sweeper, a duplicate
			// enqueue of the same message): the record's job is done.
			l.settle(ctx, p, false)
			return
		}
		if time.Now().After(deadline) {
			l.cfg.Log.Warn("the parked task was not deleted in time: the sweeper will enqueue it again", "task_id", p.TaskID)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-l.closed:
			t.Stop()
			return // the worker stops: the sweeper of a worker enqueues it again
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// Enqueue makes the parked task p an Asynq task again, with its id:
// scheduled a recheck ahead, or pending when it was woken; then deletes its
// record (settle).
func (l *Lines) Enqueue(ctx context.Context, p store.Parked) error {
	if p.Dropped {
		l.settle(ctx, p, false)
		return nil
	}
	opts := []asynq.Option{asynq.TaskID(p.TaskID), asynq.Queue(p.Queue), asynq.MaxRetry(p.MaxRetry)}
	if p.Timeout > 0 {
		opts = append(opts, asynq.Timeout(p.Timeout))
	}
	if !p.Deadline.IsZero() {
		opts = append(opts, asynq.Deadline(p.Deadline))
	}
	if p.Retention > 0 {
		opts = append(opts, asynq.Retention(p.Retention))
	}
	if !p.Woken {
		opts = append(opts, asynq.ProcessIn(l.cfg.Recheck))
	}
	_, err := l.client().EnqueueContext(ctx, asynq.NewTask(p.Type, p.Payload), opts...)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	l.settle(ctx, p, p.Woken && err == nil)
	return nil
}

// settle deletes the record of p, which is in Asynq again; when it was
// woken meanwhile (and not enqueued pending already) it runs now; when it
// was dropped meanwhile (Unpark) its task is deleted again.
func (l *Lines) settle(ctx context.Context, p store.Parked, pending bool) {
	tk, err := l.st.Take(ctx, p.TaskID, p.Gen)
	if err != nil {
		l.cfg.Log.Debug("could not delete the parking record", "task_id", p.TaskID, "error", err.Error())
	}
	switch {
	case tk.Dropped || p.Dropped:
		l.dropTask(p.Queue, p.TaskID)
	case tk.Woken && !pending:
		_ = l.insp.RunTask(p.Queue, p.TaskID)
	}
}

// dropTask deletes a dropped turn's task if it waits in Asynq.
func (l *Lines) dropTask(queue, taskID string) {
	info, err := ordering.FindTask(l.insp, queue, taskID)
	if err != nil {
		return
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		_ = l.insp.DeleteTask(info.Queue, taskID)
	}
}

// Sweep re-enqueues the parking records older than sweepAge whose task is
// in no Asynq queue (a worker died between a park and its re-enqueue), and
// deletes those whose task is there.
func (l *Lines) Sweep(ctx context.Context) {
	ids, err := l.st.Due(ctx, time.Now().Add(-sweepAge), 100)
	if err != nil {
		return
	}
	for _, id := range ids {
		p, err := l.st.Get(ctx, id)
		if errors.Is(err, store.ErrNotParked) {
			_ = l.st.Unindex(ctx, id)
			continue
		}
		if err != nil {
			return
		}
		info, err := ordering.FindTask(l.insp, p.Queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			if l.cfg.Finished != nil && l.cfg.Finished(ctx, id) {
				_, _ = l.st.Take(ctx, id, p.Gen) // finished: nothing to wait for
				continue
			}
			if err := l.Enqueue(ctx, p); err != nil {
				l.cfg.Log.Warn("could not enqueue a parked turn again", "task_id", id, "error", err.Error())
				continue
			}
			l.sweeps.Add(1)
			l.cfg.Log.Info("a parked turn left behind by its worker is enqueued again", "task_id", id, "waits_behind", p.Behind)
		case err == nil && info.State != asynq.TaskStateActive:
			l.settle(ctx, p, false)
		}
	}
}

// Sweeper is the loop that runs Sweep every SweepEvery, each sweep
// bounded by SweepEvery.
func (l *Lines) Sweeper() *service.Ticker {
	every := l.cfg.SweepEvery
	return &service.Ticker{Every: every, Tick: func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		l.Sweep(sctx)
	}}
}

// AliveOrParked is alive that also counts a parked task (momentarily in no
// Asynq queue) as alive: the dead-head check must not drop it.
func (l *Lines) AliveOrParked(alive ordering.AliveFunc) ordering.AliveFunc {
	return func(ctx context.Context, taskID string) (bool, error) {
		ok, err := alive(ctx, taskID)
		if err != nil || ok {
			return ok, err
		}
		_, perr := l.st.Get(ctx, taskID)
		switch {
		case perr == nil:
			return true, nil
		case errors.Is(perr, store.ErrNotParked):
			// Its record may have gone after its re-enqueue, between the
			// two reads: ask Asynq again.
			return alive(ctx, taskID)
		}
		return true, perr
	}
}

// Unpark takes a waiting turn out of Asynq (for a cancel): its scheduled,
// pending or retry task is deleted; a parked one (in no Asynq queue for a
// moment) has its record marked dropped, so that its re-enqueue does not
// happen, or deletes the task again right after. It reports whether it
// found the task waiting; an active task is left alone (found false: an
// attempt runs it, or is parking it; call again). The caller removes the
// turn from its line (ordering.Sequencer.Remove) and records the cancel,
// so that an attempt that starts meanwhile ends.
func (l *Lines) Unpark(ctx context.Context, queue, taskID string) (found bool, err error) {
	if found, err = l.st.Drop(ctx, taskID); err != nil {
		return false, err
	}
	info, err := ordering.FindTask(l.insp, queue, taskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound):
		return found, nil
	case err != nil:
		return found, err
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		if err := l.insp.DeleteTask(info.Queue, taskID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return found, err
		}
		return true, nil
	}
	return found, nil
}

// WakeApprovalWaiters wakes the turns that wait for the answer to approval
// request requestTaskID, now answered (or expired). Under ordering it
// wakes those in lines other than key's (a chat sharing the agent's
// thread: thread mode default); the one in key's own line is woken when
// the answer turn leaves it. Without ordering there are no lines (every
// key is ""): it wakes them all.
func (l *Lines) WakeApprovalWaiters(ctx context.Context, requestTaskID, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ws, err := l.st.TakeWaiters(ctx, requestTaskID)
	if err != nil {
		l.cfg.Log.Debug("could not read the turns that wait for the approval", "request_task_id", requestTaskID, "error", err.Error())
		return
	}
	for _, wt := range ws {
		if l.cfg.Seq != nil && wt.Key == key {
			continue
		}
		l.Wake(ctx, nil, "a turn that waited for the approval", wt.Queue, wt.Key, wt.TaskID)
	}
}
