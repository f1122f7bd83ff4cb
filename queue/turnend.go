package queue

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// finish maps the decision to reply events, the journal and Asynq.
func (t *turn) finish(ctx context.Context, d continuation.Result) error {
	if t.tk.TakenOver(ctx) {
		return t.tk.EndTakenOver() // fenced: another worker continues the turn
	}
	w := t.w
	dctx, cancel := w.deliveryCtx(ctx)
	defer cancel()
	now := time.Now()
	snap := t.letta.st.Snapshot()

	t.jr.Lock()
	a := t.jr.Current()
	a.End = now.UTC()
	a.Polls, a.Resumes = d.Polls, d.Resumes
	if d.Clock != "" {
		a.TimeoutClock = string(d.Clock)
	}
	switch d.Resend {
	case continuation.ResendSent:
		a.ResendDecision = ResendSent
		t.jr.Rec().Resends++
	case continuation.ResendForbidden:
		a.ResendDecision = ResendForbidden
	case continuation.ResendNotNeeded:
		a.ResendDecision = ResendNotNeeded
	}
	for _, id := range []string{d.RunID, snap.RunID} {
		if id != "" {
			t.jr.Rec().RunID = id
			t.ids.setRunID(id)
			break
		}
	}
	for _, id := range snap.Transcript.DuplicateToolCallIDs() {
		t.jr.Rec().Warnings = appendUnique(t.jr.Rec().Warnings, "tool_call_id "+id+" seen on two calls")
	}
	if u := snap.Usage; u != nil {
		t.jr.Rec().Usage = &Usage{PromptTokens: int(u.PromptTokens), CompletionTokens: int(u.CompletionTokens),
			TotalTokens: int(u.TotalTokens), StepCount: int(u.StepCount)}
	}
	if calls := t.letta.view.Tools(); len(calls) > 0 {
		t.jr.Rec().Tools = t.jr.Rec().Tools[:0]
		for _, c := range calls {
			ts := ToolSummary{Name: c.Name, CallID: c.CallID, Status: c.Status}
			if !c.Called.IsZero() && !c.Returned.IsZero() {
				ts.Duration = c.Returned.Sub(c.Called)
			}
			if ts.Status == "" {
				ts.Status = "unanswered"
			}
			t.jr.Rec().Tools = append(t.jr.Rec().Tools, ts)
		}
	}
	if t.jr.Rec().TTFT == 0 && !t.letta.view.FirstToken().IsZero() && !t.jr.Rec().EnqueuedAt.IsZero() {
		t.jr.Rec().TTFT = t.letta.view.FirstToken().Sub(t.jr.Rec().EnqueuedAt)
	}
	t.jr.Unlock()

	switch {
	case d.Clock == agentclient.ClockConnect || d.Clock == agentclient.ClockStall || d.Clock == agentclient.ClockTotal:
		w.obs.StreamTimeout(string(d.Clock))
	}
	if d.Polls > 0 || d.Resumes > 0 {
		w.obs.Continuation(d.Polls, d.Resumes)
	}
	if d.Resend == continuation.ResendSent || d.Resend == continuation.ResendForbidden {
		w.obs.Resend(string(a.ResendDecision))
	}
	// "outcome" on the lines below is the journal's word for how the attempt ended
	// (answered, failed, retrying, …), set where it is decided.
	log := t.log.With(slog.String("otid", t.otid), slog.String("run_id", t.jr.Rec().RunID),
		slog.String("clock", string(d.Clock)), slog.Int("polls", d.Polls), slog.Int("resumes", d.Resumes),
		slog.String("resend", string(d.Resend)))

	t.jr.Lock()
	busyInARow := 0
	for i := len(t.jr.Rec().Attempts) - 2; i >= 0 && t.jr.Rec().Attempts[i].Outcome == OutcomeBusy; i-- {
		busyInARow++
	}
	t.jr.Unlock()
	cr, cancelPhase := t.cx.Decided(d, t.letta.view.Activity())
	in := endingInput{D: d, RunID: snap.RunID, Retried: t.retried, MaxRetry: t.maxRetry, BusyInARow: busyInARow,
		StuckRetryDelay: w.cfg.StuckRetryDelay, Cancelled: cr != nil}
	if d.Outcome == continuation.Interrupted {
		in.Cause = t.letta.leaseCause(ctx)
	}
	e := endOf(in)
	if e.Outcome == OutcomeCancelled {
		t.letta.view.Finish(false)
		return t.endCancelled(dctx, log, *cr, cancelPhase, snap.Answer)
	}
	t.letta.view.Finish(e.Final == EventAnswer)
	if d.Outcome == continuation.Refused && agentclient.RetryAfter(d.Err) > MaxServerRetryAfter {
		log.Warn("Retry-After beyond the cap: not obeyed", "retry_after", agentclient.RetryAfter(d.Err).String(),
			"cap", MaxServerRetryAfter.String())
	}
	if e.Refusal && (d.Outcome == continuation.Rejected || d.Outcome == continuation.Refused) {
		t.jr.Lock()
		n := t.jr.Current().N
		t.jr.Unlock()
		if err := w.journal.RecordRefusal(dctx, t.taskID, t.otid, n, w.cfg.WorkerID); err != nil {
			t.redisFailed()
			log.Warn("could not journal the refusal; the next attempt looks for the otid first", "error", err.Error())
		}
	}

	switch {
	case e.Final == EventApprovalRequired:
		tool := &ToolEvent{Status: ToolStatusCall}
		calls := approval.Calls(snap.Transcript)
		if len(calls) > 0 {
			tool = &calls[len(calls)-1]
		}
		ae, err := t.ap.Ask(dctx, log, calls)
		if err != nil {
			return t.retry(dctx, log, endRetryOf(in, time.Second, "record the approval request: "+err.Error()))
		}
		return t.deliver(dctx, log, e.Outcome, ReplyEvent{Type: EventApprovalRequired, Tool: tool,
			StopReason: e.StopReason, Approval: ae}, snap.Answer, tool)

	case e.Final == EventAnswer:
		return t.deliver(dctx, log, e.Outcome, ReplyEvent{Type: EventAnswer, Text: snap.Answer,
			StopReason: e.StopReason}, snap.Answer, nil)

	case e.Asynq == endPutBack, d.Outcome == continuation.Busy:
		return t.busy(dctx, e)

	case e.GaveUp:
		return t.retry(dctx, log, e)

	case e.Final == EventError:
		if d.Outcome == continuation.Failed {
			if snap.Answer != "" {
				// Text the agent gave before it failed: kept, cut, never
				// delivered as the answer.
				t.jr.Lock()
				t.jr.Rec().PartialAnswer = cutText(snap.Answer, maxPartialAnswer)
				t.jr.Unlock()
			}
			if d.StopReason == "cancelled" {
				for _, s := range snap.Transcript.UnansweredToolCalls() {
					t.jr.Rec().Warnings = appendUnique(t.jr.Rec().Warnings, "tool "+s.ToolName+" ("+s.ToolCallID+") unanswered when the run was cancelled")
				}
			}
		}
		if d.Outcome == continuation.Rejected {
			e.Reason = t.letta.imageRejected(d, e.Reason)
		}
		return t.fail(dctx, log, e.Reason, e.StopReason)
	}
	return t.retry(dctx, log, e)
}

// deliver emits the final event once, writes the result and journals the
// finished turn.
func (t *turn) deliver(ctx context.Context, log *slog.Logger, outcome string, ev ReplyEvent, answer string, approval *ToolEvent) error {
	ev.TaskID, ev.Otid, ev.MessageID, ev.RunID = t.taskID, t.otid, t.msg.MessageID, t.jr.Rec().RunID
	if len(t.line.Followers()) > 0 {
		ev.AnsweredBy = t.taskID
	}
	if len(t.line.Followers()) == 0 && t.msg.Approval == nil && t.w.oneRedis() {
		return t.deliverAtOnce(ctx, log, outcome, ev, answer, approval)
	}
	emitted, err := t.finalEvent(ctx, ev) // after the attempt's progress, in one round trip
	if err != nil {
		return t.undelivered(ctx, log, err)
	}
	if !emitted {
		log.Info("final event already written by an earlier attempt")
	}
	t.finishFollowers(ctx, ev)
	t.ap.Answered(ctx, log)
	now := t.finished(outcome, ev.StopReason)
	if err := t.save(ctx, append(t.resultOps(outcome, answer, approval), t.line.ReleaseOps("")...)...); err != nil {
		log.Warn("could not journal the finished turn", "error", err.Error())
	}
	return t.delivered(log, outcome, answer, now)
}

// deliverAtOnce is deliver for a turn with no merged messages and no
// approval answer: its progress, final event, finished record, result and
// release go in one round trip, the final event first. If the event is not
// written the attempt retries (and journals that); a record saying
// answered without the event's marker is not taken for finished by the
// next attempt (see run).
func (t *turn) deliverAtOnce(ctx context.Context, log *slog.Logger, outcome string, ev ReplyEvent, answer string, approval *ToolEvent) error {
	defer t.progress.EndEvents()
	marker := t.w.replies.answeredKey(ev.TaskID)
	pe, err := t.progress.Prepare(ev, marker)
	if err != nil {
		return t.undelivered(ctx, log, err)
	}
	now := t.finished(outcome, ev.StopReason)
	save, err := t.jr.SaveOp(false)
	if err != nil {
		return t.undelivered(ctx, log, err)
	}
	// The release happens only with the final event written (its marker):
	// a pipeline's commands each run on their own. The record
	// and the result may land without the event; the next attempt, which
	// does not take a record without the marker for finished (see run),
	// writes over them.
	ops := append(append([]store.Op{save}, t.resultOps(outcome, answer, approval)...), t.line.ReleaseOps(marker)...)
	ops = append(ops, t.tk.UnregisterOps()...) // (takeover.go)
	t.progress.DropQueuedSaves()               // this record is newer
	t.jr.Lock()
	lat, ttft := t.jr.Latency(now), t.jr.Rec().TTFT
	t.jr.Unlock()
	late := func(err error) {
		// The attempt stopped waiting and retries; the writes landed after
		// all, so the next attempt finds the turn finished and reports
		// nothing: the turn finished here.
		if pe.Written() {
			log.Info("the final event was written after the attempt stopped waiting for it: turn finished", "outcome", outcome)
			t.obs.TurnFinished(t.queue, outcome, lat, ttft)
		}
	}
	err = t.progress.DoThen(ctx, late, []*progress.Event{pe}, ops...)
	if errors.Is(err, progress.ErrNotWaited) { // pe is not ours to read (late reads it)
		return t.undelivered(ctx, log, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err))
	}
	wrote := pe.Written()
	switch {
	case errors.Is(pe.Err(), errTakenOver):
		// Fenced: nothing was written. The marker the next check would
		// find is the takeover's answer, not this attempt's.
		return t.tk.EndTakenOver()
	case pe.Err() != nil:
		// The write may have happened all the same (a reply lost on the
		// way back): the answered marker says.
		if ok, aerr := t.w.replies.Answered(ctx, t.taskID); aerr != nil || !ok {
			return t.undelivered(ctx, log, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, pe.Err()))
		}
		log.Info("the final event was written though its write reported an error", "error", pe.Err().Error())
		wrote = true // by this attempt, as far as it can tell: it counts the turn
		if err != nil && !errors.Is(err, pe.Err()) {
			log.Warn("could not journal the finished turn", "error", err.Error())
		}
	case err != nil:
		t.redisFailed()
		log.Warn("could not journal the finished turn", "error", err.Error())
	}
	if !wrote {
		// An earlier attempt's write landed after this attempt had
		// started: that attempt counts the turn (late, above), not this
		// one, or the turn would be counted twice.
		log.Info("final event already written by an earlier attempt: the turn is counted by it")
		return t.deliveredBy(log, outcome, answer, now, false)
	}
	return t.delivered(log, outcome, answer, now)
}

// finished marks the record finished with outcome.
func (t *turn) finished(outcome, stopReason string) time.Time {
	now := time.Now()
	t.jr.Lock()
	t.jr.Current().Outcome = outcome
	t.jr.Rec().Outcome, t.jr.Rec().FinishedAt, t.jr.Rec().StopReason, t.jr.Rec().Error = outcome, now.UTC(), stopReason, ""
	t.jr.Unlock()
	return now
}

func (t *turn) delivered(log *slog.Logger, outcome, answer string, now time.Time) error {
	return t.deliveredBy(log, outcome, answer, now, true)
}

// deliveredBy ends a delivered attempt; count says it reports the turn
// finished (only the attempt whose write put the final event there does).
func (t *turn) deliveredBy(log *slog.Logger, outcome, answer string, now time.Time, count bool) error {
	log.Info("turn finished", "outcome", outcome, "attempt", t.jr.Current().N, "answer_bytes", len(answer))
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	if count {
		t.obs.TurnFinished(t.queue, outcome, t.jr.Latency(now), t.jr.Rec().TTFT)
	}
	return nil
}

// undelivered ends an attempt whose final event could not be written.
func (t *turn) undelivered(ctx context.Context, log *slog.Logger, err error) error {
	if errors.Is(err, errTakenOver) || t.rn.IsFenced() {
		return t.tk.EndTakenOver() // not written because another worker continues the turn
	}
	// The answer is the whole point: retry; the next attempt finds the
	// run by its id and polls the answer again.
	t.redisFailed()
	t.jr.Lock()
	t.jr.Current().Outcome, t.jr.Current().Error = OutcomeRetrying, err.Error()
	t.jr.Rec().Outcome, t.jr.Rec().FinishedAt, t.jr.Rec().StopReason = "", time.Time{}, ""
	t.jr.Unlock()
	// Whether this attempt's finish reached Redis is not known (it may
	// still, late): never write the retry over a finished record.
	if t.w.oneRedis() {
		if op, err := t.jr.SaveOp(true); err == nil {
			t.progress.DropQueuedSaves()
			_ = t.progress.Do(ctx, nil, op)
		}
	} else {
		_ = t.save(ctx)
	}
	rerr := &retryAfterError{Delay: time.Second, Reason: "deliver the answer", Err: err}
	if t.outOfRetries(rerr) {
		return t.fail(ctx, log, fmt.Sprintf("gave up after %d attempts: could not deliver the answer: %s", t.retried+1, err.Error()), "")
	}
	log.Warn("could not deliver the answer, retrying", "outcome", OutcomeRetrying, "error", err.Error())
	t.obs.AttemptFinished(t.queue, "retry", time.Since(t.start))
	return rerr
}

// finalEvent writes the attempt's final event once per turn (see
// Replies.EmitAnswerOnce) after its progress, in one round trip; no
// progress event of the attempt follows it.
func (t *turn) finalEvent(ctx context.Context, ev ReplyEvent) (emitted bool, err error) {
	if ev.Type == "" {
		ev.Type = EventAnswer
	}
	defer t.progress.EndEvents()
	pe, err := t.progress.Prepare(ev, t.w.replies.answeredKey(ev.TaskID))
	if err != nil {
		return false, err
	}
	if err := t.progress.Do(ctx, []*progress.Event{pe}); err != nil {
		return false, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err)
	}
	return pe.Written(), nil
}

// resultOps write the task's result (see writeResult) with the journal
// save they go with, when the worker made its Redis client from Asynq's
// connection (so Asynq's task hash is on it); else the result is written
// through Asynq now.
func (t *turn) resultOps(outcome, answer string, approval *ToolEvent) []store.Op {
	if t.w.rdb == nil || t.w.replies.rdb != t.w.rdb {
		t.writeResult(outcome, answer, approval)
		return nil
	}
	b, err := t.resultJSON(outcome, answer, approval)
	if err != nil {
		t.log.Warn("could not write the task result", "error", err.Error())
		return nil
	}
	return []store.Op{store.WriteResultOp(t.queue, t.taskID, b, func(c *redis.Cmd) error {
		err := c.Err()
		if store.IsNoScript(err) {
			return err // store.Run sends it again
		}
		if err != nil {
			t.redisFailed()
			t.log.Warn("could not write the task result", "error", err.Error())
		}
		return nil // the result is a summary: its loss does not fail the save
	})}
}

func (t *turn) writeResult(outcome, answer string, approval *ToolEvent) {
	b, err := t.resultJSON(outcome, answer, approval)
	if err == nil {
		_, err = t.task.ResultWriter().Write(b)
	}
	if err != nil {
		t.redisFailed()
		t.log.Warn("could not write the task result", "error", err.Error())
	}
}

func (t *turn) resultJSON(outcome, answer string, approval *ToolEvent) ([]byte, error) {
	r := TurnResult{TaskID: t.taskID, Otid: t.otid, RunID: t.jr.Rec().RunID, Outcome: outcome, Answer: answer,
		StopReason: t.jr.Rec().StopReason, Approval: approval, Usage: t.jr.Rec().Usage, Attempts: len(t.jr.Rec().Attempts),
		QueueWaitMS: t.jr.Rec().QueueWait.Milliseconds(), TTFTMS: t.jr.Rec().TTFT.Milliseconds(),
		LatencyMS: t.jr.Latency(time.Now()).Milliseconds(), AttemptMS: time.Since(t.start).Milliseconds(),
		AnsweredBy: t.jr.Rec().AnsweredBy}
	for _, f := range t.line.Followers() {
		r.Merged = append(r.Merged, f.TaskID)
	}
	if r.QueueWaitMS == 0 && !t.jr.Rec().EnqueuedAt.IsZero() && !t.jr.Rec().FirstStartedAt.IsZero() {
		r.QueueWaitMS = t.jr.Rec().FirstStartedAt.Sub(t.jr.Rec().EnqueuedAt).Milliseconds()
	}
	r.Summary = r.summary()
	n := 384 + len(r.Summary) + len(r.TaskID) + len(r.Otid) + len(r.RunID) + len(r.StopReason) + len(r.AnsweredBy) +
		len(answer) + len(r.Merged)*64 // about the size: one allocation, unless strings need escaping
	if approval != nil {
		n += 96 + len(approval.Name) + len(approval.CallID) + len(approval.Arguments) + len(approval.Return)
	}
	return appendTurnResultJSON(make([]byte, 0, n), &r), nil
}

// fail ends the turn with a permanent error: one error event, the journal,
// and SkipRetry so that Asynq archives the task.
func (t *turn) fail(ctx context.Context, log *slog.Logger, reason, stop string) error {
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID,
		Otid: t.otid, RunID: t.jr.Rec().RunID, MessageID: t.msg.MessageID, Text: reason, StopReason: stop, Permanent: true}
	if len(t.line.Followers()) > 0 {
		ev.AnsweredBy = t.taskID
	}
	// An answer turn's request learns first: a user who reads the error
	// and answers again finds the request answerable.
	t.ap.Ended(ctx, log, true)
	if _, err := t.finalEvent(ctx, ev); err != nil {
		t.redisFailed()
		log.Warn("could not emit the error event", "error", err.Error())
	}
	t.finishFollowers(ctx, ev)
	now := time.Now()
	t.jr.Lock()
	t.jr.Current().Outcome, t.jr.Current().Error = OutcomeFailed, reason
	t.jr.Rec().Outcome, t.jr.Rec().Error, t.jr.Rec().StopReason, t.jr.Rec().FinishedAt = OutcomeFailed, reason, stop, now.UTC()
	t.jr.Unlock()
	if err := t.save(ctx, t.line.ReleaseOps("")...); err != nil {
		if t.rn.IsFenced() {
			return t.tk.EndTakenOver() // its writes were dropped: the takeover ends the turn
		}
		log.Warn("could not journal the failed turn", "error", err.Error())
	}
	if stop != "" {
		log = log.With("stop_reason", stop)
	}
	log.Warn("turn failed", "outcome", OutcomeFailed, "reason", reason)
	t.w.permanent.Add(t.taskID, "otid", t.otid, "run_id", t.jr.Rec().RunID) // for the archiving's log line
	t.obs.AttemptFinished(t.queue, "archived", time.Since(t.start))
	t.obs.TurnFinished(t.queue, OutcomeFailed, t.jr.Latency(now), t.jr.Rec().TTFT)
	return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
}

// retry ends the attempt and leaves the turn to the next one (e, from
// endOf: a retry, an interruption, or a retry given up for want of retries).
func (t *turn) retry(ctx context.Context, log *slog.Logger, e ending) error {
	t.progress.End(ctx)
	if e.GaveUp {
		return t.fail(ctx, log, fmt.Sprintf("gave up after %d attempts: %s", t.retried+1, e.Reason), e.StopReason)
	}
	var rerr error = &retryAfterError{Delay: e.Delay, Reason: e.Reason, Err: e.Err}
	if e.Asynq == endInterrupted {
		rerr = &interruptedError{Reason: e.Reason, Err: e.Err}
	}
	t.jr.Lock()
	t.jr.Current().Outcome, t.jr.Current().Error = e.Outcome, e.Reason
	if e.Asynq == endRetry {
		t.jr.Current().RetryIn = e.Delay
	}
	t.jr.Unlock()
	if err := t.save(ctx); err != nil {
		if t.rn.IsFenced() {
			return t.tk.EndTakenOver() // the takeover goes on with the turn, not a retry
		}
		log.Warn("could not journal the attempt", "error", err.Error())
	}
	log.Info("turn attempt ends, retrying", "outcome", e.Outcome, "reason", e.Reason, "retry_in", e.Delay.String())
	t.obs.AttemptFinished(t.queue, "retry", time.Since(t.start))
	return rerr
}

// outOfRetries is outOfRetries for this attempt (with the worker's
// IsFailure, ordering's too).
func (t *turn) outOfRetries(err error) bool {
	if t.w.isFailure(err) {
		return t.retried+1 >= t.maxRetry
	}
	return t.retried >= t.maxRetry
}

// storedRecord is the turn's journal record as stored (a new one when it
// has none, or it cannot be read), with the turn's identity filled in: for
// an attempt that ends the turn before it has a record of its own.
func (t *turn) storedRecord(ctx context.Context) *TurnRecord {
	rec, err := t.w.journal.Get(ctx, t.taskID)
	if err != nil {
		rec = &TurnRecord{}
	}
	rec.TaskID, rec.Otid, rec.AgentID = t.taskID, t.otid, t.msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = t.msg.Conversation, t.msg.MessageID, t.queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = t.msg.EnqueuedAt
	}
	return rec
}

// giveUp ends a turn whose attempt is out of retries (outOfRetries) with a
// permanent error: through fail once the attempt has its journal record,
// else (the attempt ended before it ran: its turn never came, or Redis
// failed it) with the final error event and a failed record of its own, and
// the turn leaves its conversation's line.
func (t *turn) giveUp(reason string) error {
	ctx, cancel := t.w.deliveryCtx(t.actx)
	defer cancel()
	reason = fmt.Sprintf("gave up after %d attempts: %s", t.retried+1, reason)
	if t.jr.Rec() != nil && len(t.jr.Rec().Attempts) > t.jr.Index() {
		return t.fail(ctx, t.log, reason, "")
	}
	w := t.w
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID, Otid: t.otid, MessageID: t.msg.MessageID, Text: reason, Permanent: true}
	emitted, err := w.replies.EmitAnswerOnce(ctx, t.msg.Conversation, ev)
	if err != nil {
		t.redisFailed()
		t.log.Warn("could not emit the error event", "error", err.Error())
	} else if !emitted {
		// An earlier attempt wrote the turn's final event (and crashed
		// before Asynq heard of it): the turn is over, and stays as it
		// ended.
		t.log.Info("turn already finished by an earlier attempt")
		return nil
	}
	rec := t.storedRecord(ctx)
	now := time.Now().UTC()
	if rec.FirstStartedAt.IsZero() {
		rec.FirstStartedAt = t.start
	}
	rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: t.start.UTC(),
		End: now, Outcome: OutcomeFailed, Error: reason})
	rec.Outcome, rec.Error, rec.FinishedAt = OutcomeFailed, reason, now
	t.jr.SetRecord(rec)
	if err := w.journal.Save(ctx, rec); err != nil {
		t.redisFailed()
		t.log.Warn("could not journal the failed turn", "error", err.Error())
	}
	if w.ord != nil && t.line.Lease() == nil {
		// Never its turn: it leaves the line (a lease, when held, is
		// released as done by the caller), and the turn behind it is woken
		// when it headed the line (its acquire failed at the head).
		if err := t.line.Leave(ctx); err != nil {
			t.redisFailed()
			t.log.Warn("could not take the failed turn out of its conversation's line", "error", err.Error())
		}
	}
	t.log.Warn("turn failed", "outcome", OutcomeFailed, "reason", reason)
	w.permanent.Add(t.taskID, "otid", t.otid)
	t.obs.AttemptFinished(t.queue, "archived", time.Since(t.start))
	t.obs.TurnFinished(t.queue, OutcomeFailed, t.jr.Latency(now), 0)
	return fmt.Errorf("lettaq: turn failed: %s: %w", reason, asynq.SkipRetry)
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// maxPartialAnswer bounds TurnRecord.PartialAnswer (a failed turn's text).
const maxPartialAnswer = 8 << 10

// cutText is s cut to at most n bytes, at a rune boundary.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
