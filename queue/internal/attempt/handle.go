package attempt

import (
	"context"
	"fmt"
	"time"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/takeover"
)

// The entry of an attempt: Process makes the attempt's pipeline from its
// task and runs it.

// Process runs one attempt of one turn: the worker's asynq handler
// (queue.Worker.processTask) calls it with the task's context and the
// cancel that ends it (a takeover's fence ends it too).
//
// A thinking turn's goroutine waits for as long as the agent thinks, and
// the Go runtime only halves a goroutine's stack (at a GC) when less than
// a quarter of it is in use. So the turn's first stream returns while it
// has nothing to read (continuation.Runner.Run returns pending): everything
// down to it returns errPending, and the goroutine waits here, right under
// the handler, then resumes the turn's run. What must live across the wait
// is in the turn and its run (lettaRun). integration/bench prints what a
// thinking turn holds ("one in-flight turn holds", "stacks per in-flight
// turn").
func (w *Parts) Process(ctx context.Context, task *asynq.Task, cancel context.CancelCauseFunc) error {
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
		return nil // a takeover continues the turn (queue/internal/takeover)
	}
	defer t.Tk.Unregister()
	// An attempt that saw Redis fail ends only once Redis answers again, so
	// that Asynq can record how it ended (Parts.AwaitRedis: queue.Worker.awaitRedis).
	defer t.awaitRedis(ctx)
	if w.OrderKey == nil {
		err = t.runUnordered(ctx)
	} else {
		err = t.runOrdered(ctx)
	}
	for err == errPending {
		if err = t.LettaRun.resume(ctx); err != errPending && w.OrderKey != nil {
			t.afterRun(ctx, err) // (runOrdered's, for a run that waited)
		}
	}
	return err
}

// newTurn makes the attempt's turn; nil for a payload that is unusable
// (rejected: err is the handler's result).
func (w *Parts) newTurn(ctx context.Context, task *asynq.Task) (*Pipeline, error) {
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
		// identity, this task as its runner (queue/internal/claim).
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
	t := &Pipeline{W: w, ID: ID{Task: task, TaskID: taskID, Queue: qname, Msg: msg, Otid: ids.Otid,
		Retried: retried, MaxRetry: maxRetry, Start: start}, IDs: ids, Logger: newLogger(w.Log, ids),
		Rn: fence.Runner{ID: runner, Retried: asynqRetried, From: from}}
	t.Actx = ctx
	t.recordWriter = newRecordWriter(w.Journal, w.Trips.OneRedis, &t.Rn, t.Logger, ctx)
	t.Tk = newRegistration(t)
	t.Obs.Observer = w.Obs
	t.Jr = journal.NewAttempt(w.Stores.Saver)
	t.TextBudget.set(int64(w.Cfg.MaxReplyBytes), t.Logger, t.Jr)
	t.Progress = w.Writer.NewQueue(msg.Conversation, t.WriteFailed, t.Logger)
	key := ""
	if w.OrderKey != nil {
		key = w.OrderKey(msg)
	}
	t.Line = w.Lines.Place(line.Attempt{Key: key, TaskID: taskID, Queue: qname, Runner: runner, Task: task, Log: t.Logger, Failed: t.RedisFailed})
	t.Ap = newApprovalTurn(t)
	assemble(t)
	return t, nil
}

// assemble gives the attempt's record writer its record and progress queue,
// and makes its completer from the parts the attempt holds (newTurn, once
// they are made).
func assemble(t *Pipeline) {
	if t.recordWriter == nil {
		t.recordWriter = newRecordWriter(t.W.Journal, t.W.Trips.OneRedis, &t.Rn, t.Logger, t.Actx)
	}
	t.recordWriter.use(t.Jr, t.Progress)
	t.End = newCompleter(t.W, t.ID, t.recordWriter, &t.Obs, t.IDs, t.Line, &t.Ap, &t.Cx, t.Tk)
}

// rejectPayload archives a task whose payload is unusable.
func (w *Parts) rejectPayload(ctx context.Context, taskID, qname string, msg inbound.Message, perr error, start time.Time) error {
	dctx, cancel := w.deliveryCtx(ctx)
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
	// No attempt started (see observed): the turn ends.
	w.Obs.TurnFinished(qname, record.OutcomeFailed, 0, 0)
	return fmt.Errorf("%w: %w", perr, asynq.SkipRetry)
}

// newRegistration is the attempt's registration in its worker's registry
// (not registered yet: prepare registers it once its start read numbered
// the runner).
func newRegistration(t *Pipeline) *takeover.Registration {
	return t.W.Takeover.Attempt(takeover.Attempt{TaskID: t.TaskID, Queue: t.Queue, Runner: &t.Rn, Log: t.Logger,
		Obs: &t.Obs, Start: t.Start, Ctx: t.Actx})
}
