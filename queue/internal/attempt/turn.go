package attempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/internal/record"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/approval"
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

// Run runs one attempt of one turn: the worker's asynq handler
// (queue.Worker.processTask) calls it with the task's context and the
// cancel that ends it (a takeover's fence ends it too).
//
// A thinking turn's goroutine waits for as long as the agent thinks, and
// the Go runtime only halves a goroutine's stack (at a GC) when less than
// a quarter of it is in use. So the turn's first stream returns while it
// has nothing to read (continuation.Runner.Run returns pending): everything
// down to it returns ErrPending, and the goroutine waits here, right under
// the handler, then resumes the turn's run. What must live across the wait
// is in the turn and its run (LettaRun). integration/bench prints what a
// thinking turn holds ("one in-flight turn holds", "stacks per in-flight
// turn").
func (w *Parts) Run(ctx context.Context, task *asynq.Task, cancel context.CancelCauseFunc) error {
	t, err := w.newTurn(ctx, task)
	if t == nil {
		return err
	}
	w.Cancels.Add(t.TaskID, (*cancelRun)(t)) // before the start's reads: a cancel from then on reaches it
	defer w.Cancels.Remove(t.TaskID, (*cancelRun)(t))
	t.Rn.OnFence(cancel)
	t.Progress.SetFence(t.Tk.FencedNow, takeover.ErrTakenOver)
	defer t.Progress.Close()
	if t.Tk.ContinuedElsewhere(ctx) {
		return nil // a takeover continues the turn (takeover.go)
	}
	defer t.Tk.Unregister()
	// An attempt that saw Redis fail ends only once Redis answers again, so
	// that Asynq can record how it ended (see Worker.awaitRedis).
	defer t.awaitRedis(ctx)
	if w.OrderKey == nil {
		err = t.runUnordered(ctx)
	} else {
		err = t.runOrdered(ctx)
	}
	for err == ErrPending {
		if err = t.LettaRun.Resume(ctx); err != ErrPending && w.OrderKey != nil {
			t.afterRun(ctx, err) // (runOrdered's, for a run that waited)
		}
	}
	return err
}

// newTurn makes the attempt's turn; nil for a payload that is unusable
// (rejected: err is the handler's result).
func (w *Parts) newTurn(ctx context.Context, task *asynq.Task) (*Turn, error) {
	start := time.Now()
	taskID, _ := asynq.GetTaskID(ctx)
	if taskID == "" {
		taskID = task.ResultWriter().TaskID()
	}
	qname, _ := asynq.GetQueueName(ctx)
	retried, _ := asynq.GetRetryCount(ctx)
	maxRetry, _ := asynq.GetMaxRetry(ctx)
	runner, asynqRetried, payload, from := taskID, retried, task.Payload(), ""
	if task.Type() == inbound.TakeoverTaskType {
		// The continuation of a dead worker's turn: the turn's own
		// identity, this task as its runner (takeover.go).
		p, err := claim.DecodePayload(payload)
		if err != nil {
			w.Log.Warn("invalid takeover payload, archiving", "task_id", taskID, "error", err.Error())
			return nil, fmt.Errorf("%w: %w", err, asynq.SkipRetry)
		}
		taskID, qname, payload, from = p.TaskID, p.Queue, p.Payload, p.From
		retried, maxRetry = p.Retried+retried, p.MaxRetry
	}
	msg, perr := inbound.Decode(payload)
	if perr != nil {
		return nil, w.rejectPayload(ctx, taskID, qname, msg, perr, start)
	}
	ids := &IDs{TaskID: taskID, Otid: inbound.OtidFor(msg, taskID)}
	t := &Turn{W: w, ID: ID{Task: task, TaskID: taskID, Queue: qname, Msg: msg, Otid: ids.Otid,
		Retried: retried, MaxRetry: maxRetry, Start: start}, IDs: ids, Logger: NewLogger(w.Log, ids),
		Rn: fence.Runner{ID: runner, Retried: asynqRetried, From: from}}
	t.Actx = ctx
	t.RecordWriter = NewRecordWriter(w, &t.Rn, t.Logger, ctx)
	t.Tk = NewRegistration(t)
	t.Obs.Observer = w.Obs
	t.Jr = journal.NewAttempt(w.Saver)
	t.TextBudget.Set(int64(w.Cfg.MaxReplyBytes), t.Logger, t.Jr)
	t.Progress = w.Writer.NewQueue(msg.Conversation, t.WriteFailed, t.Logger)
	key := ""
	if w.OrderKey != nil {
		key = w.OrderKey(msg)
	}
	t.Line = w.Lines.Place(line.Attempt{Key: key, TaskID: taskID, Queue: qname, Runner: runner, Task: task, Log: t.Logger, Failed: t.RedisFailed})
	t.Ap = newApprovalTurn(t)
	Assemble(t)
	return t, nil
}

// Assemble gives the attempt's record writer its record and progress queue,
// and makes its completer from the parts the attempt holds (newTurn, once
// they are made).
func Assemble(t *Turn) {
	if t.RecordWriter == nil {
		t.RecordWriter = NewRecordWriter(t.W, &t.Rn, t.Logger, t.Actx)
	}
	t.RecordWriter.Use(t.Jr, t.Progress)
	t.End = NewCompleter(t.ID, t.RecordWriter, &t.Obs, t.IDs, t.Line, &t.Ap, &t.Cx, t.Tk)
}

// runOrdered runs the attempt holding its conversation's ordering lock.
func (t *Turn) runOrdered(ctx context.Context) error {
	lctx, cancel, err, end := t.lead(ctx)
	if end {
		return err
	}
	// The lease's own context ends with prepare: while the agent thinks,
	// the lease's loss cancels the run's work context instead
	// (LettaRun.workContext), so that a waiting turn holds one context of
	// its own, not two.
	err, end = t.prepare(lctx)
	cancel()
	if !end {
		if err = t.LettaRun.Execute(ctx); err == ErrPending {
			return err // processTask resumes the run and does the rest
		}
	}
	t.afterRun(ctx, err)
	return err
}

// lead takes the conversation's ordering lock (an approval answer first
// goes to the front of the line): end says the attempt ends here with err.
// lctx ends when the lease is lost.
func (t *Turn) lead(ctx context.Context) (lctx context.Context, cancel context.CancelFunc, err error, end bool) {
	if t.Msg.Approval != nil {
		// An answer goes before the messages that wait for it (an expiry
		// joins only now, when it is due).
		if err := t.Line.JoinFront(ctx); err != nil {
			return nil, nil, t.End.RetryEarly(err), true
		}
	}
	err, end = t.acquire(ctx)
	if end {
		return nil, nil, err, true
	}
	// The wait for the conversation counts as queue wait: the attempt
	// starts when it holds the key.
	t.Start = time.Now()
	t.End.SetStart(t.Start)
	lctx, cancel = t.Line.Context(ctx)
	return lctx, cancel, nil, false
}

// afterRun releases the conversation after the attempt (unless its last
// writes did) and wakes the next turn.
func (t *Turn) afterRun(ctx context.Context, err error) {
	t.awaitRedis(ctx) // the release too must reach Redis
	// The turn is over unless it retries; a taken-over turn keeps its place.
	done := (err == nil || errors.Is(err, asynq.SkipRetry)) && !t.Rn.IsFenced()
	if rerr := t.Line.Release(ctx, done); rerr != nil {
		t.Logger.Warn("could not release the conversation", "key", t.Line.Key(), "error", rerr.Error())
	}
}

// detached is the attempt's context without its cancellation, for writes
// that must not end with the
func (t *Turn) detached() context.Context { return context.WithoutCancel(t.Actx) }

// awaitRedis waits for Redis (Worker.awaitRedis) when a Redis read or write
// of this attempt failed since the last wait, then journals the attempt's
// record once more: how the attempt ended may be among the writes that
// failed, and the next attempt would find this one with no end and no
// outcome.
func (t *Turn) awaitRedis(ctx context.Context) {
	if !t.SawRedisFail() {
		return
	}
	t0 := time.Now()
	t.W.AwaitRedis(ctx)
	waited := time.Since(t0).Round(time.Millisecond).String()
	if ctx.Err() != nil {
		t.Logger.Warn("the attempt ends before Redis answers again; Asynq may only recover the task when its lease expires",
			"waited", waited, "error", context.Cause(ctx).Error())
		return
	}
	t.Logger.Info("Redis answers again; the attempt ends", "waited", waited)
	if !t.Jr.Ended() || t.Rn.IsFenced() {
		return // no record or attempt of its own, not ended, or not its to write
	}
	// Never over a finished record: this attempt's finish may have landed
	// after all, or its writes said finished without the final event (the
	// next attempt sees to that: see prepare).
	op, err := t.Jr.SaveOp(true)
	if err != nil {
		return
	}
	sctx, cancel := context.WithTimeout(t.detached(), progress.TripTimeout)
	defer cancel()
	if t.W.OneRedis {
		t.Progress.DropQueuedSaves()
		err = t.Progress.Do(sctx, nil, op)
	} else {
		err = store.Run(sctx, t.W.JournalRDB, []store.Op{op})[0]
	}
	if err != nil {
		t.Logger.Warn("could not journal how the attempt ended", "error", err.Error())
	}
}

// rejectPayload archives a task whose payload is unusable.
func (w *Parts) rejectPayload(ctx context.Context, taskID, qname string, msg inbound.Message, perr error, start time.Time) error {
	dctx, cancel := w.DeliveryCtx(ctx)
	defer cancel()
	w.Log.Warn("invalid turn payload, archiving", "task_id", taskID, "error", perr.Error())
	if msg.Conversation.Validate() == nil {
		if _, err := w.Replies.EmitAnswerOnce(dctx, msg.Conversation, record.ReplyEvent{Type: record.EventError, TaskID: taskID,
			MessageID: msg.MessageID, Text: perr.Error(), Permanent: true}); err != nil {
			w.Log.Warn("could not emit the error event", "task_id", taskID, "error", err.Error())
		}
	}
	now := time.Now()
	rec := &record.TurnRecord{TaskID: taskID, AgentID: msg.AgentID, Conversation: msg.Conversation, MessageID: msg.MessageID,
		Queue: qname, EnqueuedAt: msg.EnqueuedAt, FirstStartedAt: start, FinishedAt: now,
		Attempts: []record.Attempt{{N: 1, Worker: w.Cfg.WorkerID, Start: start, End: now, Outcome: record.OutcomeFailed, Error: perr.Error()}},
		Outcome:  record.OutcomeFailed, Error: perr.Error()}
	if err := w.Journal.Save(dctx, rec); err != nil {
		w.Log.Warn("could not journal the invalid payload", "task_id", taskID, "error", err.Error())
	}
	// No attempt started (see Observed): the turn ends.
	w.Obs.TurnFinished(qname, record.OutcomeFailed, 0, 0)
	return fmt.Errorf("%w: %w", perr, asynq.SkipRetry)
}

// Turn is one attempt of one turn.
type Turn struct {
	ID
	*RecordWriter            // its record's saves (Save, SaveLater) and its Redis failures (RedisFailed)
	End           *Completer // applies how the attempt ends
	W             *Parts
	Logger        *slog.Logger // every line carries task_id, otid and the run_id known then
	Obs           Observed     // the worker's Observer, as this attempt tells it
	IDs           *IDs
	Progress      *progress.Queue // progress events, written off the stream's reader

	Line       *line.Place // its place in its chat's line: the lease, the release, merged messages, the park
	TextBudget ReplyBudget // the progress text it may write to the reply stream

	Pre *store.StartReads // read before the attempt runs (until it makes its run)
	Cx  cancel.Turn       // its cancel, if one is asked for (cancelturn.go)
	Ap  approval.Turn     // its approvals: the gate, an answer turn's request (approvalturn.go)

	LettaRun *LettaRun // its run at Letta, once prepared (kept here, not in a frame: see processTask)

	Actx context.Context // the attempt's context (Asynq's): see detached

	// Takeover (takeover.go).
	Rn fence.Runner           // the runner: which task runs the attempt, fenced, gone (fence.Runner.Fence ends actx)
	Tk *takeover.Registration // its registration in the worker's registry (never nil but in tests)

	Jr *journal.Attempt // the turn's record with this attempt in it, its lock and saves
}

// startRead names what an attempt reads from Redis before it runs, in one
// round trip (with the ordering lock's acquire when it can: see
// turn.acquire): the attempt's record, whether its final event was written,
// its intents, and what approvalGate (the chat's pending approval request)
// and LettaRun.resolveThread (the chat's Letta conversation) need. The turn
// drops what it read (turn.pre) once it has made its run (prepare).
func (t *Turn) startRead() store.StartRead {
	w := t.W
	r := store.StartRead{TaskID: t.TaskID}
	if t.Msg.Approval == nil {
		r.Pending, r.AgentID, r.Scope = true, t.Msg.AgentID, w.Approvals.Scope(t.Msg.LettaConversationID, t.Msg.Conversation)
	}
	if w.Threads.Mode == ThreadConversation && t.Msg.LettaConversationID == "" {
		r.ThreadHash = ThreadHash(t.Msg.AgentID, t.Msg.Conversation)
	}
	return r
}

// ReadStart reads what startReads says, unless acquire read it with the
// lock.
func (t *Turn) ReadStart(ctx context.Context) (rec *record.TurnRecord, answered bool, intents []record.Intent, err error) {
	if t.Pre == nil {
		t.Pre = t.W.startStores().ReadStart(ctx, t.startRead())
	}
	b, found, err := t.Pre.Record()
	switch {
	case err != nil:
		return nil, false, nil, fmt.Errorf("read the turn journal: queue: journal get %s: %w", t.TaskID, err)
	case !found:
		rec = &record.TurnRecord{}
	default:
		if rec, err = journal.DecodeRecord(t.TaskID, b); err != nil {
			return nil, false, nil, fmt.Errorf("read the turn journal: %w", err)
		}
	}
	if answered, err = t.Pre.Answered(); err != nil {
		return nil, false, nil, fmt.Errorf("queue: answered %s: %w", t.TaskID, err)
	}
	raw, err := t.Pre.Intents()
	if err == nil {
		intents, err = journal.DecodeIntents(t.TaskID, raw)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: intents of task %s: %w", t.TaskID, err)
	}
	runner, err := t.Pre.Runner()
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: number the runner of task %s: %w", t.TaskID, err)
	}
	t.Jr.SetRunner(runner)
	return rec, answered, intents, nil
}

// runUnordered runs the attempt without ordering: prepare, then its run at
// Letta (see processTask for why they are apart).
func (t *Turn) runUnordered(ctx context.Context) error {
	if err, end := t.prepare(ctx); end {
		return err
	}
	return t.LettaRun.Execute(ctx)
}

// prepare does what comes before the attempt runs at Letta: the journal
// record, the accepted event, approvals, merged messages, and the turn's
// run at Letta (LettaRun). end says the attempt ends here
// with err.
func (t *Turn) prepare(ctx context.Context) (err error, end bool) {
	w := t.W
	rec, answered, intents, err := t.ReadStart(ctx)
	if err != nil {
		return t.End.RetryEarly(err), true
	}
	if op := t.Tk.Register(claim.Entry{Key: t.Line.Key(), Retried: t.Retried, MaxRetry: t.MaxRetry}, t.Jr.Runner()); op != nil {
		t.Progress.PushOp(op) // (once its start read numbered the runner)
	}
	if b, found, _ := t.Pre.Cancel(); found {
		t.Cx.NoteJSON(b, (*cancelRun)(t)) // (read with the start's reads)
	}
	if !answered && (rec.Outcome == record.OutcomeAnswered || rec.Outcome == record.OutcomeApprovalRequired) {
		// Journaled finished in the round trip that was to write the final
		// event, which did not happen (deliverAtOnce): the turn goes on.
		t.Logger.Warn("the journal says the turn finished but its final event was never written: continuing the turn", "outcome", rec.Outcome)
		rec.Outcome, rec.FinishedAt = "", time.Time{}
	}
	if answered && !FinalOutcome(rec.Outcome) && rec.Outcome != record.OutcomeCoalesced && rec.TaskID != "" {
		return t.End.FinishDelivered(ctx, rec), true
	}
	if answered || FinalOutcome(rec.Outcome) || rec.Outcome == record.OutcomeCoalesced {
		// An earlier attempt finished the turn (and crashed before Asynq
		// heard of it): nothing is sent and nothing emitted again.
		t.Logger.Info("turn already finished by an earlier attempt", "outcome", rec.Outcome)
		if t.Msg.Approval != nil && rec.TaskID != "" {
			// That attempt may have ended before its request was told.
			t.Jr.SetRecord(rec)
			t.Ap.Ended(ctx, t.Logger, rec.Outcome == record.OutcomeFailed)
		}
		if rec.Outcome == record.OutcomeFailed {
			return fmt.Errorf("lettaq: turn already failed: %s: %w", rec.Error, asynq.SkipRetry), true
		}
		if rec.Outcome == record.OutcomeCancelled {
			return fmt.Errorf("lettaq: turn already cancelled: %w", asynq.SkipRetry), true
		}
		t.Jr.SetRecord(rec)
		t.End.WriteResult(rec.Outcome, "", nil)
		return nil, true
	}

	// The record: create or extend, with this attempt in it.
	t.Jr.Read(rec) // (as read: before it gets this turn's ids)
	rec.TaskID, rec.Otid, rec.AgentID = t.TaskID, t.Otid, t.Msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = t.Msg.Conversation, t.Msg.MessageID, t.Queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = t.Msg.EnqueuedAt
	}
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = t.Start
	}
	rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: w.Cfg.WorkerID, Start: t.Start,
		TakenOverFrom: t.Rn.From})
	t.Jr.Begin(rec)
	t.IDs.SetRunID(rec.RunID) // the run id the journal has
	var wait time.Duration
	if !rec.EnqueuedAt.IsZero() {
		wait = t.Start.Sub(rec.EnqueuedAt)
	}
	t.Obs.TaskStarted(t.Queue, t.Jr.Current().N, wait)
	if t.Jr.Current().N == 1 {
		acc := record.ReplyEvent{TaskID: t.TaskID, Otid: t.Otid, MessageID: t.Msg.MessageID}
		if t.Msg.Approval != nil {
			acc = inbound.AnswerAccepted(t.Msg, t.TaskID, t.Otid, 0)
		}
		acc.Type = record.EventAccepted
		if acc.Phase == "" {
			acc.Phase = record.PhaseQueued
		}
		t.Progress.PushOnce(acc, w.ReplyStore.Keys.Accepted(t.TaskID))
	}
	if cr, end := t.Cx.AtStart(len(journal.LiveIntents(intents)) > 0, t.Jr.Rec().RunID != "", t.Logger); end {
		return t.End.EndCancelled(ctx, t.Logger, *cr, record.CancelPhaseWaiting, ""), true
	}
	var approvals []agentclient.ApprovalAnswer
	if approvals, err, end = t.approvalGate(ctx); end {
		return err, true
	}
	if OpenWait(rec) != nil {
		t.Jr.Lock()
		EndWaits(rec, t.Start) // it waited (parking.go): it starts now
		t.Jr.Unlock()
	}
	// The attempt is journaled once it is sure to run: an attempt that
	// waits (parks) above leaves no attempt in the record, not even for
	// the moment between a queued save and the park's own.
	t.SaveLater()
	intents = journal.LiveIntents(intents)
	if err := t.Line.TakeFollowers(ctx, t.Msg.Conversation.Integration, len(intents) == 0 && t.Msg.Approval == nil); err != nil {
		return t.End.RetryEarly(err), true
	}
	text := t.Msg.Text
	if fs := t.Line.Followers(); len(fs) > 0 {
		text = line.MergeText(t.Msg.SenderID, t.Msg.Text, fs)
		t.Jr.Lock()
		rec.Merged = rec.Merged[:0]
		for _, f := range fs {
			rec.Merged = append(rec.Merged, f.MessageID)
		}
		t.Jr.Unlock()
		t.Logger.Info("messages merged into this turn", "merged", len(fs))
	}

	// What the run at Letta needs lives in its LettaRun, which the turn
	// holds: the goroutine waits under processTask, not in a frame of the
	// run's (see processTask).
	known, read := t.Pre.ThreadRead()
	t.Pre = nil // read: not kept while the turn waits
	spec := continuation.Turn{AgentID: t.Msg.AgentID, Otid: t.Otid, Text: text, SenderID: t.Msg.SenderID,
		Started: rec.FirstStartedAt, PriorIntent: len(intents) > 0, Images: inbound.LettaImages(t.Msg.Images), Approvals: approvals}
	t.LettaRun = NewLettaRun(RunParts{Runner: w.Runner, Cfg: &w.Cfg, Threads: w.Threads,
		Journal: w.Journal, Replies: w.ReplyStore, OneRedis: w.OneRedis, Msg: &t.Msg, IDs: t.IDs,
		Log: t.Logger, Dctx: t.detached(), Line: t.Line, Jr: t.Jr, Tk: t.Tk, Cx: &t.Cx, Ca: (*cancelRun)(t),
		Progress: t.Progress, Rec: t.RecordWriter, End: t.End},
		spec, RunThread{Known: known, Read: read}, rec.RunID, t.emitEvent)
	return nil, false
}

// emit queues a progress event (see progress.Queue): it never waits on Redis.
func (t *Turn) emit(ev record.ReplyEvent) { t.emitEvent(ev, false) }

// emitEvent queues a progress event with the turn's ids (its run adds the
// run id: newLettaRun); a lazy one waits for whatever else is due
// (progress.Queue.PushLazy).
func (t *Turn) emitEvent(ev record.ReplyEvent, lazy bool) {
	ev, ok := t.TextBudget.Take(ev)
	if !ok {
		return
	}
	ev.TaskID, ev.Otid, ev.MessageID = t.TaskID, t.Otid, t.Msg.MessageID
	if lazy {
		t.Progress.PushLazy(ev)
		return
	}
	t.Progress.Push(ev)
}

// NewRegistration is the attempt's registration in its worker's registry
// (not registered yet: prepare registers it once its start read numbered
// the runner).
func NewRegistration(t *Turn) *takeover.Registration {
	return t.W.Takeover.Attempt(takeover.Attempt{TaskID: t.TaskID, Queue: t.Queue, Runner: &t.Rn, Log: t.Logger,
		Obs: &t.Obs, Start: t.Start, Ctx: t.Actx})
}
