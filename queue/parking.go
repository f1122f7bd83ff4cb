package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
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
// (acquire's NotYourTurn) or its chat's approval request is open
// (approvalGate), parks: it writes a parking record (store.Parking) and
// ends its Asynq task with asynq.RevokeTask (deleted: not retried, not
// archived, no retry used). Right after, the worker enqueues the task again
// with the same id as an Asynq scheduled task WaitCheck ahead (the safety
// net: in asynqmon it reads as scheduled, far ahead), with the retries it
// had left (parkedOf), and deletes the record. The event that frees it
// wakes it (wakeTask): the turn that frees the line, or the answer (or
// expiry) of the approval request, which wakes the waiters noted under the
// request (AddWaiter, wakeApprovalWaiters). A scheduled task is moved to
// pending; a parked one, momentarily in no Asynq queue, has its record
// marked woken, and its re-enqueue makes it pending. A sweeper on every
// worker re-enqueues the records a worker left behind (it died between the
// revoke and the re-enqueue). Nothing adds an attempt to the journal: the
// record gets one Wait per thing waited behind.
//
// Parking does not need ordering: without it (Ordering.Off) there is no
// line and no NotYourTurn, but a message behind its chat's approval
// request parks the same way; the parker then has an Inspector of its own,
// and the answer wakes every waiter of the request (with ordering the one
// in the answer's own line is woken by the answer turn's release).

// Defaults of the parking.
const (
	// defaultSweepEvery: how often a worker looks for parking records left
	// behind.
	defaultSweepEvery = 30 * time.Second
	// sweepAge: a record younger than this is its worker's business.
	sweepAge = 5 * time.Second
	// reenqueueWait bounds how long the re-enqueue waits for Asynq to
	// delete the revoked task (the sweeper does it after that).
	reenqueueWait = 10 * time.Second
	// wakeWait bounds how long wakeTask looks for a task that is between
	// two states.
	wakeWait = time.Second
)

// parker is the worker's side of parking, with or without ordering.
type parker struct {
	w       *Worker
	st      store.Parking
	recheck time.Duration // the safety net: Ordering.WaitCheck
	// insp is the orderer's Inspector, or without ordering one of the
	// parker's own (ownsInsp: closed with it).
	insp     *asynq.Inspector
	ownsInsp bool

	acOnce sync.Once
	ac     *asynq.Client

	// afterRevoke, when set (tests), is called instead of the re-enqueue
	// that follows a park: a worker that dies there.
	afterRevoke func(p store.Parked)
	sweeps      atomic.Int64 // re-enqueues done by the sweeper (tests)

	pending   sync.WaitGroup // re-enqueues in flight (drain)
	closed    chan struct{}  // closed by close: re-enqueues in flight give up (the sweeper does them)
	closeOnce sync.Once
}

func newParker(w *Worker) *parker {
	pk := &parker{w: w, st: store.Parking{RDB: w.replies.rdb, Keys: store.Keys{Prefix: w.replies.opts.Prefix}},
		recheck: w.cfg.Ordering.recheck(), closed: make(chan struct{})}
	if w.ord != nil {
		pk.insp = w.ord.insp
	} else {
		pk.insp, pk.ownsInsp = asynq.NewInspector(w.conn), true
	}
	return pk
}

func (pk *parker) client() *asynq.Client {
	pk.acOnce.Do(func() { pk.ac = asynq.NewClient(pk.w.conn) })
	return pk.ac
}

// drain waits up to d for the re-enqueues in flight (a worker shutting
// down: the handlers returned, Asynq deletes their revoked tasks).
func (pk *parker) drain(d time.Duration) {
	if pk == nil {
		return
	}
	done := make(chan struct{})
	go func() { pk.pending.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func (pk *parker) close() {
	if pk == nil {
		return
	}
	pk.closeOnce.Do(func() { close(pk.closed) })
	pk.drain(time.Second)
	if pk.ac != nil {
		_ = pk.ac.Close()
	}
	if pk.ownsInsp {
		_ = pk.insp.Close()
	}
}

// errParked is what the handler of a parked attempt returns.
var errParked = fmt.Errorf("lettaq: the turn waits (parked): %w", asynq.RevokeTask)

// park ends the attempt of a turn that waits behind behind (a task id, or
// "approval request <id>"): the parking record, then the journal's wait,
// then RevokeTask. It returns nil when the turn could not be parked (the
// caller puts it back as before).
func (t *turn) park(ctx context.Context, behind, reason string) error {
	pk := t.w.park
	if pk == nil {
		return nil
	}
	if t.rn.ID != t.taskID {
		// A takeover (takeover.go) runs the turn under a task of its own
		// while the original task may still be active in Asynq: the turn's
		// id cannot be enqueued again now. It is put back, as without
		// parking (rare: a taken-over turn held its line).
		return nil
	}
	info, err := pk.insp.GetTaskInfo(t.queue, t.taskID)
	if err != nil {
		t.log.Debug("could not read the task to park it: it is put back", "error", err.Error())
		return nil
	}
	p := parkedOf(info, t.task, behind, reason, t.key, t.w.cfg.WorkerID)
	if err := pk.st.Park(ctx, p); err != nil {
		t.redisFailed()
		t.log.Warn("could not park the waiting turn: it is put back", "error", err.Error())
		return nil
	}
	if pk.afterRevoke != nil {
		go pk.afterRevoke(p)
	} else {
		pk.pending.Add(1)
		go func() {
			defer pk.pending.Done()
			pk.reenqueueAfterRevoke(p)
		}()
	}
	t.obs.AttemptFinished(t.queue, "busy", time.Since(t.start))
	return errParked
}

// parkedOf is the parking record of the active task info (task: its type
// and payload) that waits behind behind on line key. The task is enqueued
// again with the retries it has left (a new Asynq task starts at Retried
// 0): info.MaxRetry − info.Retried, at least 1, the one TaskMaxRetry keeps
// for put-backs (a takeover task gets the same, takeover.go).
func parkedOf(info *asynq.TaskInfo, task *asynq.Task, behind, reason, key, workerID string) store.Parked {
	now := time.Now()
	return store.Parked{TaskID: info.ID, Type: task.Type(), Payload: task.Payload(), Queue: info.Queue,
		MaxRetry: max(info.MaxRetry-info.Retried, 1), Timeout: info.Timeout, Deadline: info.Deadline, Retention: info.Retention,
		Behind: behind, Reason: reason, Key: key, Since: now,
		Gen: strconv.FormatInt(now.UnixNano(), 36) + ":" + workerID}
}

// reenqueueAfterRevoke waits for Asynq to delete the revoked task p, then
// enqueues it again (enqueue).
func (pk *parker) reenqueueAfterRevoke(p store.Parked) {
	ctx, cancel := context.WithTimeout(context.Background(), reenqueueWait+5*time.Second)
	defer cancel()
	deadline := time.Now().Add(reenqueueWait)
	backoff := 2 * time.Millisecond
	for {
		info, err := pk.insp.GetTaskInfo(p.Queue, p.TaskID)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound):
			if err := pk.enqueue(ctx, p); err != nil {
				pk.w.log.Warn("could not enqueue the waiting turn again: the sweeper will", "task_id", p.TaskID, "error", err.Error())
			}
			return
		case err == nil && info.State != asynq.TaskStateActive:
			// Enqueued again by someone else (the sweeper, a duplicate
			// enqueue of the same message): the record's job is done.
			pk.settle(ctx, p, false)
			return
		}
		if time.Now().After(deadline) {
			pk.w.log.Warn("the parked task was not deleted in time: the sweeper will enqueue it again", "task_id", p.TaskID)
			return
		}
		t := time.NewTimer(backoff)
		select {
		case <-pk.closed:
			t.Stop()
			return // the worker stops: the sweeper of a worker enqueues it again
		case <-t.C:
		}
		backoff = min(2*backoff, 50*time.Millisecond)
	}
}

// enqueue makes the parked task p an Asynq task again, with its id:
// scheduled a recheck ahead, or pending when it was woken; then deletes its
// record (settle).
func (pk *parker) enqueue(ctx context.Context, p store.Parked) error {
	if p.Dropped {
		pk.settle(ctx, p, false)
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
		opts = append(opts, asynq.ProcessIn(pk.recheck))
	}
	_, err := pk.client().EnqueueContext(ctx, asynq.NewTask(p.Type, p.Payload), opts...)
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		return err
	}
	pk.settle(ctx, p, p.Woken && err == nil)
	return nil
}

// settle deletes the record of p, which is in Asynq again; when it was
// woken meanwhile (and not enqueued pending already) it runs now; when it
// was dropped meanwhile (unpark) its task is deleted again.
func (pk *parker) settle(ctx context.Context, p store.Parked, pending bool) {
	tk, err := pk.st.Take(ctx, p.TaskID, p.Gen)
	if err != nil {
		pk.w.log.Debug("could not delete the parking record", "task_id", p.TaskID, "error", err.Error())
	}
	switch {
	case tk.Dropped || p.Dropped:
		pk.dropTask(p.Queue, p.TaskID)
	case tk.Woken && !pending:
		_ = pk.insp.RunTask(p.Queue, p.TaskID)
	}
}

// dropTask deletes a dropped turn's task if it waits in Asynq.
func (pk *parker) dropTask(queue, taskID string) {
	info, err := ordering.FindTask(pk.insp, queue, taskID)
	if err != nil {
		return
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		_ = pk.insp.DeleteTask(info.Queue, taskID)
	}
}

// sweep re-enqueues the parking records older than sweepAge whose task is
// in no Asynq queue (a worker died between a park and its re-enqueue), and
// deletes those whose task is there.
func (pk *parker) sweep(ctx context.Context) {
	ids, err := pk.st.Due(ctx, time.Now().Add(-sweepAge), 100)
	if err != nil {
		return
	}
	for _, id := range ids {
		p, err := pk.st.Get(ctx, id)
		if errors.Is(err, store.ErrNotParked) {
			_ = pk.st.Unindex(ctx, id)
			continue
		}
		if err != nil {
			return
		}
		info, err := ordering.FindTask(pk.insp, p.Queue, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
			if rec, jerr := pk.w.journal.Get(ctx, id); jerr == nil && (finalOutcome(rec.Outcome) || rec.Outcome == OutcomeCoalesced) {
				_, _ = pk.st.Take(ctx, id, p.Gen) // finished: nothing to wait for
				continue
			}
			if err := pk.enqueue(ctx, p); err != nil {
				pk.w.log.Warn("could not enqueue a parked turn again", "task_id", id, "error", err.Error())
				continue
			}
			pk.sweeps.Add(1)
			pk.w.log.Info("a parked turn left behind by its worker is enqueued again", "task_id", id, "waits_behind", p.Behind)
		case err == nil && info.State != asynq.TaskStateActive:
			pk.settle(ctx, p, false)
		}
	}
}

// sweeper is the loop that runs sweep every every, each sweep bounded by
// every.
func (pk *parker) sweeper(every time.Duration) *service.Ticker {
	return &service.Ticker{Every: every, Tick: func(ctx context.Context) {
		sctx, cancel := context.WithTimeout(ctx, every)
		defer cancel()
		pk.sweep(sctx)
	}}
}

// aliveOrParked is alive that also counts a parked task (momentarily in no
// Asynq queue) as alive: the dead-head check must not drop it.
func (w *Worker) aliveOrParked(alive ordering.AliveFunc) ordering.AliveFunc {
	if w.park == nil {
		return alive
	}
	return func(ctx context.Context, taskID string) (bool, error) {
		ok, err := alive(ctx, taskID)
		if err != nil || ok {
			return ok, err
		}
		_, perr := w.park.st.Get(ctx, taskID)
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

// unpark takes a waiting turn out of Asynq (for a cancel): its scheduled, pending or retry task is deleted; a parked one (in no
// Asynq queue for a moment) has its record marked dropped, so that its
// re-enqueue does not happen, or deletes the task again right after. It
// reports whether it found the task waiting; an active task is left alone
// (found false: an attempt runs it, or is parking it; call again). The
// caller removes the turn from its line (ordering.Sequencer.Remove) and
// records the cancel, so that an attempt that starts meanwhile ends.
func (w *Worker) unpark(ctx context.Context, queue, taskID string) (found bool, err error) {
	if found, err = w.park.st.Drop(ctx, taskID); err != nil {
		return false, err
	}
	info, err := ordering.FindTask(w.park.insp, queue, taskID)
	switch {
	case errors.Is(err, asynq.ErrTaskNotFound):
		return found, nil
	case err != nil:
		return found, err
	}
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		if err := w.park.insp.DeleteTask(info.Queue, taskID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
			return found, err
		}
		return true, nil
	}
	return found, nil
}

// recordWait journals that the turn waits behind behind (one Wait per
// thing waited behind: nothing is written when the open wait is the same,
// and first is false then). rec is the turn's record as read (nil: it is
// read here).
func (t *turn) recordWait(ctx context.Context, rec *TurnRecord, behind, reason string) (first bool) {
	if rec == nil {
		r, err := t.w.journal.Get(ctx, t.taskID)
		switch {
		case errors.Is(err, ErrNotFound):
			r = &TurnRecord{TaskID: t.taskID, Otid: t.otid, AgentID: t.msg.AgentID, Conversation: t.msg.Conversation,
				MessageID: t.msg.MessageID, Queue: t.queue, EnqueuedAt: t.msg.EnqueuedAt}
		case err != nil:
			t.log.Debug("could not read the journal to record the wait", "error", err.Error())
			return true
		}
		rec = r
	}
	if !addWait(rec, behind, reason, time.Now().UTC()) {
		return false
	}
	if err := t.w.journal.Save(ctx, rec); err != nil {
		t.log.Debug("could not journal the wait", "error", err.Error())
	}
	return true
}

// addWait adds a wait behind behind to rec, closing the open one if it is
// behind something else; false when the open wait is already this one (the
// answer turn of an approval request the turn waits behind is part of that
// wait).
func addWait(rec *TurnRecord, behind, reason string, now time.Time) bool {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		open := rec.Waits[n-1].Behind
		if open == behind {
			return false
		}
		if req, ok := strings.CutPrefix(open, "approval request "); ok && isAnswerOf(behind, req) {
			return false
		}
		rec.Waits[n-1].Until = now
	}
	rec.Waits = append(rec.Waits, Wait{From: now, Behind: behind, Reason: reason})
	return true
}

// endWaits closes rec's open wait: the turn starts at now.
func endWaits(rec *TurnRecord, now time.Time) {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		rec.Waits[n-1].Until = now.UTC()
	}
}

// openWait is rec's open wait, nil when none.
func openWait(rec *TurnRecord) *Wait {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		return &rec.Waits[n-1]
	}
	return nil
}

// logWait logs the turn's wait: Info when it starts waiting behind
// something new, Debug for a look again.
func (t *turn) logWait(first bool, msg string, attrs ...any) {
	lvl := slog.LevelDebug
	if first {
		lvl = slog.LevelInfo
	}
	t.log.Log(context.Background(), lvl, msg, attrs...)
}

// parkNotYourTurn parks an attempt that is not its conversation's turn
// (err: a *ordering.NotYourTurnError): its journal record gets the wait;
// nil when it could not park (it is put back as before).
func (t *turn) parkNotYourTurn(ctx context.Context, err error) error {
	var nyt *ordering.NotYourTurnError
	if t.w.park == nil || !errors.As(err, &nyt) || nyt.Head == "" || nyt.Head == t.taskID {
		return nil
	}
	state := "waiting"
	if nyt.HeadHeld {
		state = "running"
	}
	reason := fmt.Sprintf("waiting for the turn ahead: %s (%s; position %d in the line)", nyt.Head, state, nyt.Position)
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	perr := t.park(rctx, nyt.Head, reason)
	if perr == nil {
		return nil
	}
	if err := t.w.waker().wakeIfFreed(rctx, t.key, t.taskID); err != nil {
		t.log.Debug("could not look at the line again after the park", "error", err.Error())
	}
	first := t.recordWait(rctx, nil, nyt.Head, reason)
	t.logWait(first, "the turn waits for the turn ahead of it", "behind", nyt.Head, "position", nyt.Position,
		"recheck_in", t.w.park.recheck.String())
	return perr
}

// sweepEvery is how often the worker's sweeper runs:
// WorkerConfig.ParkSweepEvery, default defaultSweepEvery.
func (w *Worker) sweepEvery() time.Duration {
	if w.cfg.ParkSweepEvery > 0 {
		return w.cfg.ParkSweepEvery
	}
	return defaultSweepEvery
}

// parkApproval parks a message that waits for the answer to its chat's
// approval request p, with or without ordering: the attempt is no attempt
// (the record is left as it was, with one wait behind the request), the
// awaiting_approval phase is emitted when the wait begins. nil when it
// could not park.
//
// The message is noted as a waiter of the request, which the answer (or
// the expiry) wakes (wakeApprovalWaiters). An answer recorded between the
// gate's read and that note would miss it: the request is read again after
// the note, and a message whose request was answered meanwhile wakes
// itself (its record is marked woken: its re-enqueue makes it pending).
func (t *turn) parkApproval(ctx context.Context, log *slog.Logger, p *pendingApproval) error {
	behind := "approval request " + p.RequestTaskID
	reason := "waiting for the answer to approval request " + p.RequestTaskID
	perr := t.park(ctx, behind, reason)
	if perr == nil {
		return nil
	}
	if err := t.w.park.st.AddWaiter(ctx, p.RequestTaskID, t.taskID, t.queue, t.key); err != nil {
		log.Debug("could not note the waiter on its approval request", "error", err.Error())
	}
	if now, err := t.w.approvals.get(ctx, p.RequestTaskID); errors.Is(err, ErrNoApproval) || (err == nil && now.AnsweredBy != "") {
		if _, err := t.w.park.st.Wake(ctx, t.taskID); err != nil {
			log.Debug("could not wake the message whose approval request was answered meanwhile", "error", err.Error())
		}
	}
	t.mu.Lock()
	t.rec.Attempts = t.rec.Attempts[:t.att]
	if len(t.rec.Attempts) == 0 {
		t.rec.FirstStartedAt = time.Time{}
	}
	first := addWait(t.rec, behind, reason, time.Now().UTC())
	t.mu.Unlock()
	if first {
		t.emit(ReplyEvent{Type: EventPhase, Phase: PhaseAwaitingApproval,
			Approval: &ApprovalEvent{RequestTaskID: p.RequestTaskID, ExpiresAt: p.ExpiresAt}})
	}
	t.progress.End(ctx)
	if err := t.save(ctx); err != nil { // (replaces the save prepare queued)
		log.Warn("could not journal the wait", "error", err.Error())
	}
	t.logWait(first, "the message waits for the answer to the chat's approval request", "recheck_in", t.w.park.recheck.String())
	return perr
}

// wakeApprovalWaiters wakes the turns that wait for the answer to approval
// request requestTaskID, now answered (or expired). Under ordering it
// wakes those in lines other than key's (a chat sharing the agent's
// thread: thread mode default); the one in key's own line is woken when
// the answer turn leaves it. Without ordering there are no lines (every
// key is ""): it wakes them all.
func (w *Worker) wakeApprovalWaiters(ctx context.Context, requestTaskID, key string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	ws, err := w.park.st.TakeWaiters(ctx, requestTaskID)
	if err != nil {
		w.log.Debug("could not read the turns that wait for the approval", "request_task_id", requestTaskID, "error", err.Error())
		return
	}
	for _, wt := range ws {
		if w.ord != nil && wt.Key == key {
			continue
		}
		if err := w.wakeTask(ctx, wt.Queue, wt.Key, wt.TaskID); err != nil {
			w.log.Debug("could not wake a turn that waited for the approval", "task_id", wt.TaskID, "error", err.Error())
		}
	}
}

// isAnswerOf reports whether taskID is an answer turn of the approval
// request requestTaskID (answerTaskIDAfter: its first answer, or one after
// failed ones).
func isAnswerOf(taskID, requestTaskID string) bool {
	if taskID == AnswerTaskID(requestTaskID) {
		return true
	}
	rest, ok := strings.CutPrefix(taskID, "answer#")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ":")
	return ok && rest == strings.TrimPrefix(AnswerTaskID(requestTaskID), "answer:")
}
