package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
)

// processTask is the asynq handler of one attempt of one turn.
//
// A thinking turn's goroutine waits for as long as the agent thinks, and
// the Go runtime only halves a goroutine's stack (at a GC) when less than
// a quarter of it is in use. So the turn's first stream returns while it
// has nothing to read (continuation.Runner.Run returns pending): everything
// down to it returns attempt.ErrPending, and the goroutine waits here, right under
// the handler, then resumes the turn's run. What must live across the wait
// is in the turn and its run (attempt.LettaRun). integration/bench prints what a
// thinking turn holds ("one in-flight turn holds", "stacks per in-flight
// turn").
func (w *Worker) processTask(ctx context.Context, task *asynq.Task) error {
	w.inflight.Add(1)
	defer w.inflight.Done()
	ctx, stopped, cancel := w.stops.Add(ctx)
	defer stopped()
	t, err := w.newTurn(ctx, task)
	if t == nil {
		return err
	}
	w.cancels.Add(t.TaskID, (*cancelRun)(t)) // before the start's reads: a cancel from then on reaches it
	defer w.cancels.Remove(t.TaskID, (*cancelRun)(t))
	t.rn.OnFence(cancel)
	t.progress.SetFence(t.tk.FencedNow, errTakenOver)
	defer t.progress.Close()
	if t.tk.ContinuedElsewhere(ctx) {
		return nil // a takeover continues the turn (takeover.go)
	}
	defer t.tk.Unregister()
	// An attempt that saw Redis fail ends only once Redis answers again, so
	// that Asynq can record how it ended (see Worker.awaitRedis).
	defer t.awaitRedis(ctx)
	if w.ord == nil {
		err = t.runUnordered(ctx)
	} else {
		err = t.runOrdered(ctx)
	}
	for err == attempt.ErrPending {
		if err = t.lettaRun.Resume(ctx); err != attempt.ErrPending && w.ord != nil {
			t.afterRun(ctx, err) // (runOrdered's, for a run that waited)
		}
	}
	return err
}

// newTurn makes the attempt's turn; nil for a payload that is unusable
// (rejected: err is the handler's result).
func (w *Worker) newTurn(ctx context.Context, task *asynq.Task) (*turn, error) {
	start := time.Now()
	taskID, _ := asynq.GetTaskID(ctx)
	if taskID == "" {
		taskID = task.ResultWriter().TaskID()
	}
	qname, _ := asynq.GetQueueName(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	runner, asynqRetried, payload, from := taskID, retried, task.Payload(), ""
	if task.Type() == TakeoverTaskType {
		// The continuation of a dead worker's turn: the turn's own
		// identity, this task as its runner (takeover.go).
		p, err := claim.DecodePayload(payload)
		if err != nil {
			w.log.Warn("invalid takeover payload, archiving", "task_id", taskID, "error", err.Error())
			return nil, fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		taskID, qname, payload, from = p.TaskID, p.Queue, p.Payload, p.From
		retried, maxRetry = p.Retried+retried, p.MaxRetry
	}
	msg, perr := DecodePayload(payload)
	if perr != nil {
		return nil, w.rejectPayload(ctx, taskID, qname, msg, perr, start)
	}
	ids := &attempt.IDs{TaskID: taskID, Otid: OtidFor(msg, taskID)}
	t := &turn{w: w, ID: attempt.ID{Task: task, TaskID: taskID, Queue: qname, Msg: msg, Otid: ids.Otid,
		Retried: retried, MaxRetry: maxRetry, Start: start}, ids: ids, log: attempt.NewLogger(w.log, ids),
		rn: fence.Runner{ID: runner, Retried: asynqRetried, From: from}}
	t.actx = ctx
	t.RecordWriter = attempt.NewRecordWriter(w.attempts, &t.rn, t.log, ctx)
	t.tk = newRegistration(t)
	t.obs.Observer = w.obs
	t.jr = journal.NewAttempt(w.journal.saver)
	t.textBudget.Set(int64(w.cfg.MaxReplyBytes), t.log, t.jr)
	t.progress = w.writer.NewQueue(msg.Conversation, t.WriteFailed, t.log)
	key := ""
	if w.ord != nil {
		key = w.ord.cfg.Key(msg)
	}
	t.line = w.lines.Place(line.Attempt{Key: key, TaskID: taskID, Queue: qname, Runner: runner, Task: task, Log: t.log, Failed: t.RedisFailed})
	t.ap = newApprovalTurn(t)
	assemble(t)
	return t, nil
}

// assemble gives the attempt's record writer its record and progress queue,
// and makes its completer from the parts the attempt holds (newTurn, once
// they are made).
func assemble(t *turn) {
	if t.RecordWriter == nil {
		t.RecordWriter = attempt.NewRecordWriter(t.w.attempts, &t.rn, t.log, t.actx)
	}
	t.RecordWriter.Use(t.jr, t.progress)
	t.end = attempt.NewCompleter(t.ID, t.RecordWriter, &t.obs, t.ids, t.line, &t.ap, &t.cx, t.tk)
}

// runOrdered runs the attempt holding its conversation's ordering lock.
func (t *turn) runOrdered(ctx context.Context) error {
	lctx, cancel, err, end := t.lead(ctx)
	if end {
		return err
	}
	// The lease's own context ends with prepare: while the agent thinks,
	// the lease's loss cancels the run's work context instead
	// (attempt.LettaRun.workContext), so that a waiting turn holds one context of
	// its own, not two.
	err, end = t.prepare(lctx)
	cancel()
	if !end {
		if err = t.lettaRun.Execute(ctx); err == attempt.ErrPending {
			return err // processTask resumes the run and does the rest
		}
	}
	t.afterRun(ctx, err)
	return err
}

// lead takes the conversation's ordering lock (an approval answer first
// goes to the front of the line): end says the attempt ends here with err.
// lctx ends when the lease is lost.
func (t *turn) lead(ctx context.Context) (lctx context.Context, cancel context.CancelFunc, err error, end bool) {
	if t.Msg.Approval != nil {
		// An answer goes before the messages that wait for it (an expiry
		// joins only now, when it is due).
		if err := t.line.JoinFront(ctx); err != nil {
			return nil, nil, t.end.RetryEarly(err), true
		}
	}
	err, end = t.acquire(ctx)
	if end {
		return nil, nil, err, true
	}
	// The wait for the conversation counts as queue wait: the attempt
	// starts when it holds the key.
	t.Start = time.Now()
	t.end.SetStart(t.Start)
	lctx, cancel = t.line.Context(ctx)
	return lctx, cancel, nil, false
}

// afterRun releases the conversation after the attempt (unless its last
// writes did) and wakes the next turn.
func (t *turn) afterRun(ctx context.Context, err error) {
	t.awaitRedis(ctx) // the release too must reach Redis
	// The turn is over unless it retries; a taken-over turn keeps its place.
	done := (err == nil || errors.Is(err, asynq.SkipRetry)) && !t.rn.IsFenced()
	if rerr := t.line.Release(ctx, done); rerr != nil {
		t.log.Warn("could not release the conversation", "key", t.line.Key(), "error", rerr.Error())
	}
}

// detached is the attempt's context without its cancellation, for writes
// that must not end with the attempt.
func (t *turn) detached() context.Context { return context.WithoutCancel(t.actx) }

// awaitRedis waits for Redis (Worker.awaitRedis) when a Redis read or write
// of this attempt failed since the last wait, then journals the attempt's
// record once more: how the attempt ended may be among the writes that
// failed, and the next attempt would find this one with no end and no
// outcome.
func (t *turn) awaitRedis(ctx context.Context) {
	if !t.SawRedisFail() {
		return
	}
	t0 := time.Now()
	t.w.awaitRedis(ctx)
	waited := time.Since(t0).Round(time.Millisecond).String()
	if ctx.Err() != nil {
		t.log.Warn("the attempt ends before Redis answers again; Asynq may only recover the task when its lease expires",
			"waited", waited, "error", context.Cause(ctx).Error())
		return
	}
	t.log.Info("Redis answers again; the attempt ends", "waited", waited)
	if !t.jr.Ended() || t.rn.IsFenced() {
		return // no record or attempt of its own, not ended, or not its to write
	}
	// Never over a finished record: this attempt's finish may have landed
	// after all, or its writes said finished without the final event (the
	// next attempt sees to that: see prepare).
	op, err := t.jr.SaveOp(true)
	if err != nil {
		return
	}
	sctx, cancel := context.WithTimeout(t.detached(), progress.TripTimeout)
	defer cancel()
	if t.w.oneRedis() {
		t.progress.DropQueuedSaves()
		err = t.progress.Do(sctx, nil, op)
	} else {
		err = store.Run(sctx, t.w.journal.rdb, []store.Op{op})[0]
	}
	if err != nil {
		t.log.Warn("could not journal how the attempt ended", "error", err.Error())
	}
}

// rejectPayload archives a task whose payload is unusable.
func (w *Worker) rejectPayload(ctx context.Context, taskID, qname string, msg Message, perr error, start time.Time) error {
	dctx, cancel := w.attempts.DeliveryCtx(ctx)
	defer cancel()
	w.log.Warn("invalid turn payload, archiving", "task_id", taskID, "error", perr.Error())
	if msg.Conversation.Validate() == nil {
		if _, err := w.replies.EmitAnswerOnce(dctx, msg.Conversation, ReplyEvent{Type: EventError, TaskID: taskID,
			MessageID: msg.MessageID, Text: perr.Error(), Permanent: true}); err != nil {
			w.log.Warn("could not emit the error event", "task_id", taskID, "error", err.Error())
		}
	}
	now := time.Now()
	rec := &TurnRecord{TaskID: taskID, AgentID: msg.AgentID, Conversation: msg.Conversation, MessageID: msg.MessageID,
		Queue: qname, EnqueuedAt: msg.EnqueuedAt, FirstStartedAt: start, FinishedAt: now,
		Attempts: []Attempt{{N: 1, Worker: w.cfg.WorkerID, Start: start, End: now, Outcome: OutcomeFailed, Error: perr.Error()}},
		Outcome:  OutcomeFailed, Error: perr.Error()}
	if err := w.journal.Save(dctx, rec); err != nil {
		w.log.Warn("could not journal the invalid payload", "task_id", taskID, "error", err.Error())
	}
	// No attempt started (see attempt.Observed): the turn ends.
	w.obs.TurnFinished(qname, OutcomeFailed, 0, 0)
	return fmt.Errorf("%w: %w", perr, asynq.SkipRetry)
}

// turn is one attempt of one turn.
type turn struct {
	attempt.ID
	*attempt.RecordWriter                    // its record's saves (Save, SaveLater) and its Redis failures (RedisFailed)
	end                   *attempt.Completer // applies how the attempt ends
	w                     *Worker
	log                   *slog.Logger     // every line carries task_id, otid and the run_id known then
	obs                   attempt.Observed // the worker's Observer, as this attempt tells it
	ids                   *attempt.IDs
	progress              *progress.Queue // progress events, written off the stream's reader

	line       *line.Place         // its place in its chat's line: the lease, the release, merged messages, the park
	textBudget attempt.ReplyBudget // the progress text it may write to the reply stream

	pre *store.StartReads // read before the attempt runs (until it makes its run)
	cx  cancel.Turn       // its cancel, if one is asked for (cancelturn.go)
	ap  approval.Turn     // its approvals: the gate, an answer turn's request (approvalturn.go)

	lettaRun *attempt.LettaRun // its run at Letta, once prepared (kept here, not in a frame: see processTask)

	actx context.Context // the attempt's context (Asynq's): see detached

	// Takeover (takeover.go).
	rn fence.Runner           // the runner: which task runs the attempt, fenced, gone (fence.Runner.Fence ends actx)
	tk *takeover.Registration // its registration in the worker's registry (never nil but in tests)

	jr *journal.Attempt // the turn's record with this attempt in it, its lock and saves
}

// startRead names what an attempt reads from Redis before it runs, in one
// round trip (with the ordering lock's acquire when it can: see
// turn.acquire): the attempt's record, whether its final event was written,
// its intents, and what approvalGate (the chat's pending approval request)
// and attempt.LettaRun.resolveThread (the chat's Letta conversation) need. The turn
// drops what it read (turn.pre) once it has made its run (prepare).
func (t *turn) startRead() store.StartRead {
	w := t.w
	r := store.StartRead{TaskID: t.TaskID}
	if t.Msg.Approval == nil {
		r.Pending, r.AgentID, r.Scope = true, t.Msg.AgentID, w.approvals.Scope(t.Msg.LettaConversationID, t.Msg.Conversation)
	}
	if w.threads.Mode == ThreadConversation && t.Msg.LettaConversationID == "" {
		r.ThreadHash = attempt.ThreadHash(t.Msg.AgentID, t.Msg.Conversation)
	}
	return r
}

// startStores are the stores startRead reads.
func (w *Worker) startStores() store.StartStores {
	return store.StartStores{Journal: w.journal.st, Replies: w.replies.st,
		Approvals: w.approvals.Store().Redis(), Threads: w.threads.Store()}
}

// readStart reads what startReads says, unless acquire read it with the
// lock.
func (t *turn) readStart(ctx context.Context) (rec *TurnRecord, answered bool, intents []Intent, err error) {
	if t.pre == nil {
		t.pre = t.w.startStores().ReadStart(ctx, t.startRead())
	}
	b, found, err := t.pre.Record()
	switch {
	case err != nil:
		return nil, false, nil, fmt.Errorf("read the turn journal: queue: journal get %s: %w", t.TaskID, err)
	case !found:
		rec = &TurnRecord{}
	default:
		if rec, err = journal.DecodeRecord(t.TaskID, b); err != nil {
			return nil, false, nil, fmt.Errorf("read the turn journal: %w", err)
		}
	}
	if answered, err = t.pre.Answered(); err != nil {
		return nil, false, nil, fmt.Errorf("queue: answered %s: %w", t.TaskID, err)
	}
	raw, err := t.pre.Intents()
	if err == nil {
		intents, err = journal.DecodeIntents(t.TaskID, raw)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: intents of task %s: %w", t.TaskID, err)
	}
	runner, err := t.pre.Runner()
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: number the runner of task %s: %w", t.TaskID, err)
	}
	t.jr.SetRunner(runner)
	return rec, answered, intents, nil
}

// runUnordered runs the attempt without ordering: prepare, then its run at
// Letta (see processTask for why they are apart).
func (t *turn) runUnordered(ctx context.Context) error {
	if err, end := t.prepare(ctx); end {
		return err
	}
	return t.lettaRun.Execute(ctx)
}

// prepare does what comes before the attempt runs at Letta: the journal
// record, the accepted event, approvals, merged messages, and the turn's
// run at Letta (attempt.LettaRun). end says the attempt ends here
// with err.
func (t *turn) prepare(ctx context.Context) (err error, end bool) {
	w := t.w
	rec, answered, intents, err := t.readStart(ctx)
	if err != nil {
		return t.end.RetryEarly(err), true
	}
	if op := t.tk.Register(claim.Entry{Key: t.line.Key(), Retried: t.Retried, MaxRetry: t.MaxRetry}, t.jr.Runner()); op != nil {
		t.progress.PushOp(op) // (once its start read numbered the runner)
	}
	if b, found, _ := t.pre.Cancel(); found {
		t.cx.NoteJSON(b, (*cancelRun)(t)) // (read with the start's reads)
	}
	if !answered && (rec.Outcome == OutcomeAnswered || rec.Outcome == OutcomeApprovalRequired) {
		// Journaled finished in the round trip that was to write the final
		// event, which did not happen (deliverAtOnce): the turn goes on.
		t.log.Warn("the journal says the turn finished but its final event was never written: continuing the turn", "outcome", rec.Outcome)
		rec.Outcome, rec.FinishedAt = "", time.Time{}
	}
	if answered && !attempt.FinalOutcome(rec.Outcome) && rec.Outcome != OutcomeCoalesced && rec.TaskID != "" {
		return t.end.FinishDelivered(ctx, rec), true
	}
	if answered || attempt.FinalOutcome(rec.Outcome) || rec.Outcome == OutcomeCoalesced {
		// An earlier attempt finished the turn (and crashed before Asynq
		// heard of it): nothing is sent and nothing emitted again.
		t.log.Info("turn already finished by an earlier attempt", "outcome", rec.Outcome)
		if t.Msg.Approval != nil && rec.TaskID != "" {
			// That attempt may have ended before its request was told.
			t.jr.SetRecord(rec)
			t.ap.Ended(ctx, t.log, rec.Outcome == OutcomeFailed)
		}
		if rec.Outcome == OutcomeFailed {
			return fmt.Errorf("lettaq: turn already failed: %s: %w", rec.Error, asynq.SkipRetry), true
		}
		if rec.Outcome == OutcomeCancelled {
			return fmt.Errorf("lettaq: turn already cancelled: %w", asynq.SkipRetry), true
		}
		t.jr.SetRecord(rec)
		t.end.WriteResult(rec.Outcome, "", nil)
		return nil, true
	}

	// The record: create or extend, with this attempt in it.
	t.jr.Read(rec) // (as read: before it gets this turn's ids)
	rec.TaskID, rec.Otid, rec.AgentID = t.TaskID, t.Otid, t.Msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = t.Msg.Conversation, t.Msg.MessageID, t.Queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = t.Msg.EnqueuedAt
	}
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = t.Start
	}
	rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: t.Start,
		TakenOverFrom: t.rn.From})
	t.jr.Begin(rec)
	t.ids.SetRunID(rec.RunID) // the run id the journal has
	var wait time.Duration
	if !rec.EnqueuedAt.IsZero() {
		wait = t.Start.Sub(rec.EnqueuedAt)
	}
	t.obs.TaskStarted(t.Queue, t.jr.Current().N, wait)
	if t.jr.Current().N == 1 {
		acc := ReplyEvent{TaskID: t.TaskID, Otid: t.Otid, MessageID: t.Msg.MessageID}
		if t.Msg.Approval != nil {
			acc = answerAccepted(t.Msg, t.TaskID, t.Otid, 0)
		}
		acc.Type = EventAccepted
		if acc.Phase == "" {
			acc.Phase = PhaseQueued
		}
		t.progress.PushOnce(acc, w.replies.acceptedKey(t.TaskID))
	}
	if cr, end := t.cx.AtStart(len(journal.LiveIntents(intents)) > 0, t.jr.Rec().RunID != "", t.log); end {
		return t.end.EndCancelled(ctx, t.log, *cr, CancelPhaseWaiting, ""), true
	}
	var approvals []agentclient.ApprovalAnswer
	if approvals, err, end = t.approvalGate(ctx); end {
		return err, true
	}
	if attempt.OpenWait(rec) != nil {
		t.jr.Lock()
		attempt.EndWaits(rec, t.Start) // it waited (parking.go): it starts now
		t.jr.Unlock()
	}
	// The attempt is journaled once it is sure to run: an attempt that
	// waits (parks) above leaves no attempt in the record, not even for
	// the moment between a queued save and the park's own.
	t.SaveLater()
	intents = journal.LiveIntents(intents)
	if err := t.line.TakeFollowers(ctx, t.Msg.Conversation.Integration, len(intents) == 0 && t.Msg.Approval == nil); err != nil {
		return t.end.RetryEarly(err), true
	}
	text := t.Msg.Text
	if fs := t.line.Followers(); len(fs) > 0 {
		text = line.MergeText(t.Msg.SenderID, t.Msg.Text, fs)
		t.jr.Lock()
		rec.Merged = rec.Merged[:0]
		for _, f := range fs {
			rec.Merged = append(rec.Merged, f.MessageID)
		}
		t.jr.Unlock()
		t.log.Info("messages merged into this turn", "merged", len(fs))
	}

	// What the run at Letta needs lives in its attempt.LettaRun, which the turn
	// holds: the goroutine waits under processTask, not in a frame of the
	// run's (see processTask).
	known, read := t.pre.ThreadRead()
	t.pre = nil // read: not kept while the turn waits
	spec := continuation.Turn{AgentID: t.Msg.AgentID, Otid: t.Otid, Text: text, SenderID: t.Msg.SenderID,
		Started: rec.FirstStartedAt, PriorIntent: len(intents) > 0, Images: inbound.LettaImages(t.Msg.Images), Approvals: approvals}
	t.lettaRun = attempt.NewLettaRun(attempt.RunParts{Runner: w.runner, Cfg: &w.attempts.Cfg, Threads: w.threads,
		Journal: journalView{w.journal}, Replies: w.replies.st, OneRedis: w.oneRedis(), Msg: &t.Msg, IDs: t.ids,
		Log: t.log, Dctx: t.detached(), Line: t.line, Jr: t.jr, Tk: t.tk, Cx: &t.cx, Ca: (*cancelRun)(t),
		Progress: t.progress, Rec: t.RecordWriter, End: t.end},
		spec, attempt.RunThread{Known: known, Read: read}, rec.RunID, t.emitEvent)
	return nil, false
}

// emit queues a progress event (see progress.Queue): it never waits on Redis.
func (t *turn) emit(ev ReplyEvent) { t.emitEvent(ev, false) }

// emitEvent queues a progress event with the turn's ids (its run adds the
// run id: newLettaRun); a lazy one waits for whatever else is due
// (progress.Queue.PushLazy).
func (t *turn) emitEvent(ev ReplyEvent, lazy bool) {
	ev, ok := t.textBudget.Take(ev)
	if !ok {
		return
	}
	ev.TaskID, ev.Otid, ev.MessageID = t.TaskID, t.Otid, t.Msg.MessageID
	if lazy {
		t.progress.PushLazy(ev)
		return
	}
	t.progress.Push(ev)
}

// newRegistration is the attempt's registration in its worker's registry
// (not registered yet: prepare registers it once its start read numbered
// the runner).
func newRegistration(t *turn) *takeover.Registration {
	return t.w.tk.Attempt(takeover.Attempt{TaskID: t.TaskID, Queue: t.Queue, Runner: &t.rn, Log: t.log,
		Obs: &t.obs, Start: t.Start, Ctx: t.actx})
}
