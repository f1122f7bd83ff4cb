package attempt

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// The pipeline's steps: the line's lease (ordered), the start's checks and
// the journal record (prepare), the run at Letta, the release after it.

// runOrdered runs the attempt holding its conversation's ordering lock.
func (t *Pipeline) runOrdered(ctx context.Context) error {
	lctx, cancel, err, end := t.lead(ctx)
	if end {
		return err
	}
	// The lease's own context ends with prepare: while the agent thinks,
	// the lease's loss cancels the run's work context instead
	// (lettaRun.workContext), so that a waiting turn holds one context of
	// its own, not two.
	err, end = t.prepare(lctx)
	cancel()
	if !end {
		if err = t.LettaRun.execute(ctx); err == errPending {
			return err // Parts.Process resumes the run and does the rest
		}
	}
	t.afterRun(ctx, err)
	return err
}

// lead takes the conversation's ordering lock (an approval answer first
// goes to the front of the line): end says the attempt ends here with err.
// lctx ends when the lease is lost.
func (t *Pipeline) lead(ctx context.Context) (lctx context.Context, cancel context.CancelFunc, err error, end bool) {
	if t.Msg.Approval != nil {
		// An answer goes before the messages that wait for it (an expiry
		// joins only now, when it is due).
		if err := t.Line.JoinFront(ctx); err != nil {
			return nil, nil, t.End.retryEarly(err), true
		}
	}
	err, end = t.acquire(ctx)
	if end {
		return nil, nil, err, true
	}
	// The wait for the conversation counts as queue wait: the attempt
	// starts when it holds the key.
	t.Start = time.Now()
	t.End.setStart(t.Start)
	lctx, cancel = t.Line.Context(ctx)
	return lctx, cancel, nil, false
}

// afterRun releases the conversation after the attempt (unless its last
// writes did) and wakes the next turn.
func (t *Pipeline) afterRun(ctx context.Context, err error) {
	failed := t.awaitRedis(ctx) // the release too must reach Redis
	// The turn is over unless it retries; a taken-over turn keeps its place.
	done := (err == nil || errors.Is(err, asynq.SkipRetry)) && !t.Rn.IsFenced()
	if !done && failed && !t.Rn.IsFenced() && t.finishedAfterAll(ctx) {
		t.Logger.Info("the turn's final event was written after all: the turn leaves its line; its task retries and finds it finished")
		done = true
	}
	if rerr := t.Line.Release(ctx, done); rerr != nil {
		t.Logger.Warn("could not release the conversation", "key", t.Line.Key(), "error", rerr.Error())
	}
}

// awaitRedis waits for Redis (Parts.AwaitRedis) when a Redis read or write
// of this attempt failed since the last wait, then journals the attempt's
// record once more: how the attempt ended may be among the writes that
// failed, and the next attempt would find this one with no end and no
// outcome.
//
// It reports whether a Redis read or write had failed.
func (t *Pipeline) awaitRedis(ctx context.Context) bool {
	if !t.sawRedisFail() {
		return false
	}
	t0 := time.Now()
	t.W.AwaitRedis(ctx)
	waited := time.Since(t0).Round(time.Millisecond).String()
	if ctx.Err() != nil {
		t.Logger.Warn("the attempt ends before Redis answers again; Asynq may only recover the task when its lease expires",
			"waited", waited, "error", context.Cause(ctx).Error())
		return true
	}
	t.Logger.Info("Redis answers again; the attempt ends", "waited", waited)
	if !t.Jr.Ended() || t.Rn.IsFenced() {
		return true // no record or attempt of its own, not ended, or not its to write
	}
	// Never over a finished record: this attempt's finish may have landed
	// after all, or its writes said finished without the final event (the
	// next attempt sees to that: see prepare).
	op, err := t.Jr.SaveOp(true)
	if err != nil {
		return true
	}
	sctx, cancel := context.WithTimeout(t.detached(), progress.TripTimeout)
	defer cancel()
	if t.W.Trips.OneRedis {
		t.Progress.DropQueuedSaves()
		err = t.Progress.Do(sctx, nil, op)
	} else {
		err = store.Run(sctx, t.W.Stores.JournalRDB, []store.Op{op})[0]
	}
	if err != nil {
		t.Logger.Warn("could not journal how the attempt ended", "error", err.Error())
	}
	return true
}

// finishedAfterAll reports whether the final event of the turn is written
// though the attempt ends with an error after a Redis failure: the write
// reported a failure, or the attempt stopped waiting for it, and it landed
// all the same (its answered marker exists). The turn is over then, and
// leaves its line now, so that the next turn is woken at once, instead of
// when this task runs again and finds the turn finished: Asynq, which may
// not have been able to move the task to its retries either, then only
// recovers it once its lease expired (a minute or two; Asynq v0.26's
// syncer tries the move again with a context that is already cancelled).
func (t *Pipeline) finishedAfterAll(ctx context.Context) bool {
	if t.W.Stores.Replies == nil {
		return false
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), progress.TripTimeout)
	defer cancel()
	ok, err := t.W.Stores.Replies.Answered(rctx, t.TaskID)
	return err == nil && ok
}

// runUnordered runs the attempt without ordering: prepare, then its run at
// Letta (see Parts.Process for why they are apart).
func (t *Pipeline) runUnordered(ctx context.Context) error {
	if err, end := t.prepare(ctx); end {
		return err
	}
	return t.LettaRun.execute(ctx)
}

// prepare does what comes before the attempt runs at Letta: the journal
// record, the accepted event, approvals, merged messages, and the turn's
// run at Letta (lettaRun). end says the attempt ends here
// with err.
func (t *Pipeline) prepare(ctx context.Context) (err error, end bool) {
	w := t.W
	rec, answered, intents, err := t.ReadStart(ctx)
	if err != nil {
		return t.End.retryEarly(err), true
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
		return t.End.finishDelivered(ctx, rec), true
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
		t.End.writeResult(rec.Outcome, "", nil)
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
	t.IDs.setRunID(rec.RunID) // the run id the journal has
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
		t.Progress.PushOnce(acc, w.Stores.Replies.Keys.Accepted(t.TaskID))
	}
	if cr, end := t.Cx.AtStart(len(journal.LiveIntents(intents)) > 0, t.Jr.Rec().RunID != "", t.Logger); end {
		return t.End.endCancelled(ctx, t.Logger, *cr, record.CancelPhaseWaiting, ""), true
	}
	var approvals []agentclient.ApprovalAnswer
	if approvals, err, end = t.approvalGate(ctx); end {
		return err, true
	}
	if openWait(rec) != nil {
		t.Jr.Lock()
		endWaits(rec, t.Start) // it waited (parking.go): it starts now
		t.Jr.Unlock()
	}
	// The attempt is journaled once it is sure to run: an attempt that
	// waits (parks) above leaves no attempt in the record, not even for
	// the moment between a queued save and the park's own.
	t.saveLater()
	intents = journal.LiveIntents(intents)
	if err := t.Line.TakeFollowers(ctx, t.Msg.Conversation.Integration, len(intents) == 0 && t.Msg.Approval == nil); err != nil {
		return t.End.retryEarly(err), true
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

	// What the run at Letta needs lives in its lettaRun, which the turn
	// holds: the goroutine waits under Parts.Process, not in a frame of the
	// run's (see Parts.Process).
	known, read := t.Pre.ThreadRead()
	t.Pre = nil // read: not kept while the turn waits
	spec := continuation.Turn{AgentID: t.Msg.AgentID, Otid: t.Otid, Text: text, SenderID: t.Msg.SenderID,
		Started: rec.FirstStartedAt, PriorIntent: len(intents) > 0, Images: inbound.LettaImages(t.Msg.Images), Approvals: approvals}
	t.LettaRun = newLettaRun(runParts{Runner: w.Runner, Cfg: &w.Cfg, Threads: w.Threads,
		Journal: w.Journal, Replies: w.Stores.Replies, OneRedis: w.Trips.OneRedis, Msg: &t.Msg, IDs: t.IDs,
		Log: t.Logger, Dctx: t.detached(), Line: t.Line, Jr: t.Jr, Tk: t.Tk, Cx: &t.Cx, Ca: (*cancelRun)(t),
		Progress: t.Progress, Rec: t.recordWriter, End: t.End},
		spec, runThread{Known: known, Read: read}, rec.RunID, t.emitEvent)
	return nil, false
}

// emit queues a progress event (see progress.Queue): it never waits on Redis.
func (t *Pipeline) emit(ev record.ReplyEvent) { t.emitEvent(ev, false) }

// emitEvent queues a progress event with the turn's ids (its run adds the
// run id: newLettaRun); a lazy one waits for whatever else is due
// (progress.Queue.PushLazy).
func (t *Pipeline) emitEvent(ev record.ReplyEvent, lazy bool) {
	ev, ok := t.TextBudget.take(ev)
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
