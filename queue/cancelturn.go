package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/cancelsub"
)

// The worker's side of a cancel (Client.Cancel; see cancel.go).
//
// A turn learns of its cancel three ways: its attempt's start reads the
// record (with the start's other reads, before the ordering acquire can put
// it back); the worker's subscription to the cancel channel hears the task
// id while the attempt runs (and reads the records of its running turns
// whenever it (re)subscribes, for what it missed); beforeSend reads it again
// in the intent's round trip. Then:
//
//   - nothing was sent yet (no intent, no run): the turn ends at once,
//     cancelled (endCancelled, or cancelWaiting when it is not its chat's
//     turn), never sent;
//   - about to send: beforeSend refuses, the turn ends cancelled;
//   - its run is underway (streaming, followed after a lost stream, or found
//     by the attempt that recovers a turn whose worker died): the worker asks
//     Letta to cancel it (askLetta: the conversation's cancel, or in agent
//     mode the agent endpoint's cancel of the run, once its id is known), and
//     lets the run end as Letta ends it: the stream (or the run, polled) says
//     cancelled, and the turn ends cancelled with what the agent had said; a
//     run that ended first is answered as usual (cancelEnds).
//
// A cancelled turn's attempt returns nil with its result written (outcome
// cancelled): the task completes, never retried, and counts as processed,
// not failed, in Asynq's metrics.

// CancelObserver is an Observer that is also told of cancelled turns (the
// phase is one of the CancelPhase… constants). A worker's Observer that
// implements it is told.
type CancelObserver interface {
	TurnCancelled(queue, phase string)
}

// errCancelledBeforeSend is beforeSend's refusal of a cancelled turn.
var errCancelledBeforeSend = errors.New("lettaq: the turn was cancelled before it was sent")

// cancelRegistry holds the turns a worker is running, by task id, for the
// cancel channel.
type cancelRegistry struct {
	mu sync.Mutex
	m  map[string]*turn
}

func (r *cancelRegistry) add(t *turn) {
	r.mu.Lock()
	if r.m == nil {
		r.m = make(map[string]*turn)
	}
	r.m[t.taskID] = t
	r.mu.Unlock()
}

func (r *cancelRegistry) remove(t *turn) {
	r.mu.Lock()
	if r.m[t.taskID] == t {
		delete(r.m, t.taskID)
	}
	r.mu.Unlock()
}

func (r *cancelRegistry) get(id string) *turn {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.m[id]
}

func (r *cancelRegistry) ids() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]string, 0, len(r.m))
	for id := range r.m {
		out = append(out, id)
	}
	return out
}

// turnCancel is a turn's side of its cancel (guarded by mu: the cancel
// channel's goroutine, the stream's reader and the turn all reach it).
type turnCancel struct {
	mu         sync.Mutex
	rec        *CancelRecord // the cancel asked for (nil: none)
	thread     bool          // the turn's Letta thread is known (threadKnown)
	convID     string        // its conversation ("": the agent endpoints)
	asking     bool          // a call to Letta's cancel is under way or done
	waitRun    bool          // Letta's cancel waits for the run's id
	ended      bool          // the turn is finishing: Letta is not asked any more
	beforeSend bool          // beforeSend refused the send
	recovered  bool          // the attempt started with its run known
}

// cancelSubscriber is the worker's subscription to the cancel channel
// (queue/internal/cancelsub): a cancel of a turn this worker runs is noted
// on the turn (noteCancel); on every (re)subscription the records of the
// running turns are read, for the cancels published while the worker was
// not subscribed.
func (w *Worker) cancelSubscriber() *cancelsub.Subscriber {
	return &cancelsub.Subscriber{Subscribe: w.replies.st.SubscribeCancels, Resync: w.recheckCancels, Heard: w.heardCancel}
}

// watchCancels follows the cancel channel until ctx ends.
func (w *Worker) watchCancels(ctx context.Context) { w.cancelSubscriber().Run(ctx) }

// heardCancel notes the cancel the channel published for taskID, when the
// turn runs here (else its start reads the record).
func (w *Worker) heardCancel(ctx context.Context, taskID string) {
	t := w.cancels.get(taskID)
	if t == nil {
		return
	}
	b, found, err := w.replies.st.GetCancel(ctx, taskID)
	if err != nil {
		t.log.Warn("could not read the turn's cancel record", "error", err.Error())
		b, found = nil, true // the publish says there is one
	}
	if found {
		t.noteCancel(b)
	}
}

// recheckCancels reads the cancel records of the turns running here.
func (w *Worker) recheckCancels(ctx context.Context) {
	ids := w.cancels.ids()
	if len(ids) == 0 {
		return
	}
	recs, err := w.replies.st.GetCancels(ctx, ids)
	if err != nil {
		w.log.Warn("could not read the cancel records of the running turns", "error", err.Error())
		return
	}
	for i, b := range recs {
		if b == nil {
			continue
		}
		if t := w.cancels.get(ids[i]); t != nil {
			t.noteCancel(b)
		}
	}
}

// noteCancel notes the turn's cancel (b: its record's JSON), and asks
// Letta to cancel the run when the turn has one underway.
func (t *turn) noteCancel(b []byte) {
	var cr CancelRecord
	if len(b) > 0 && json.Unmarshal(b, &cr) != nil {
		cr = CancelRecord{By: "unknown"}
	}
	t.cx.mu.Lock()
	first := t.cx.rec == nil
	if first {
		t.cx.rec = &cr
	}
	ask := t.cx.thread && !t.cx.ended
	t.cx.mu.Unlock()
	if first {
		t.log.Info("the turn is cancelled", "by", cr.By)
	}
	if ask {
		t.askLetta()
	}
}

// cancelAsked is the turn's cancel, nil when none was asked for.
func (t *turn) cancelAsked() *CancelRecord {
	t.cx.mu.Lock()
	defer t.cx.mu.Unlock()
	if t.cx.rec == nil {
		return nil
	}
	cr := *t.cx.rec
	return &cr
}

// cancelAtStart notes a cancel record that the start's reads found (pre,
// when read).
func (t *turn) cancelAtStart() {
	if b, found, _ := t.pre.Cancel(); found {
		t.noteCancel(b)
	}
}

// readCancel reads the turn's cancel record on its own (when the start's
// reads come after the ordering acquire): a failed read is left to the
// start's reads.
func (t *turn) readCancel(ctx context.Context) {
	b, found, err := t.w.replies.st.GetCancel(ctx, t.taskID)
	if err == nil && found {
		t.noteCancel(b)
	}
}

// threadKnown tells the cancel the turn's Letta thread (execute): from here
// on a cancel asks Letta.
func (t *turn) threadKnown(convID string) {
	t.cx.mu.Lock()
	t.cx.thread, t.cx.convID = true, convID
	ask := t.cx.rec != nil
	t.cx.mu.Unlock()
	if ask {
		t.askLetta()
	}
}

// runKnown tells the cancel that the run's id is known now (saveRunID).
func (t *turn) runKnown() {
	t.cx.mu.Lock()
	ask := t.cx.waitRun && t.cx.rec != nil && !t.cx.ended
	t.cx.mu.Unlock()
	if ask {
		t.askLetta()
	}
}

// askLetta asks Letta to cancel the turn's run, once, off the caller's
// goroutine: the conversation's cancel, or on the agent endpoints the
// agent's cancel of this run (never without its id: the agent may be
// running other chats' runs). A 409 before the run is known (nothing runs
// yet) asks again once it is; any other failure leaves the turn to end as
// Letta ends it.
func (t *turn) askLetta() {
	t.cx.mu.Lock()
	if t.cx.asking || t.cx.ended || !t.cx.thread {
		t.cx.mu.Unlock()
		return
	}
	conv, runID := t.cx.convID, t.ids.currentRunID()
	if conv == "" && runID == "" {
		t.cx.waitRun = true
		t.cx.mu.Unlock()
		return
	}
	t.cx.asking, t.cx.waitRun = true, false
	t.cx.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(t.detached(), t.w.cfg.Budget.RequestTimeout)
		defer cancel()
		var err error
		if conv == "" {
			_, err = t.w.client.CancelRuns(ctx, t.msg.AgentID, []string{runID})
		} else {
			_, err = t.w.client.CancelConversation(ctx, conv, t.msg.AgentID)
		}
		log := t.log.With(slog.String("conversation", conv))
		switch {
		case err == nil:
			log.Info("asked Letta to cancel the turn's run")
		case agentclient.StatusCode(err) == http.StatusConflict && runID == "":
			// Nothing runs yet (the send is on its way): again once the run
			// is known.
			t.cx.mu.Lock()
			t.cx.asking, t.cx.waitRun = false, true
			t.cx.mu.Unlock()
			log.Info("Letta has no run to cancel yet: asking again once the run is known")
			if t.ids.currentRunID() != "" {
				t.runKnown()
			}
		case agentclient.StatusCode(err) == http.StatusConflict:
			log.Info("Letta has no run to cancel: the turn ends as its run did", "error", err.Error())
		default:
			log.Warn("Letta's cancel failed: the turn ends as its run does", "error", err.Error())
		}
	}()
}

// cancelBeforeSend is beforeSend's check: the turn was cancelled (found
// says the round trip of the intent read a record).
func (t *turn) cancelBeforeSend(found bool) error {
	if found && t.cancelAsked() == nil {
		t.readCancel(t.detached())
		if t.cancelAsked() == nil {
			t.noteCancel(nil)
		}
	}
	if t.cancelAsked() == nil {
		return nil
	}
	t.cx.mu.Lock()
	t.cx.beforeSend = true
	t.cx.mu.Unlock()
	return errCancelledBeforeSend
}

// cancelDecided is told that the run's decision is made: from here on
// Letta is not asked to cancel any more. It returns the turn's cancel (nil:
// none) and the phase the turn is in (for endOf's cancelled ending).
func (t *turn) cancelDecided(d continuation.Result) (cr *CancelRecord, phase string) {
	t.cx.mu.Lock()
	t.cx.ended = true
	beforeSend, recovered := t.cx.beforeSend, t.cx.recovered
	t.cx.mu.Unlock()
	if cr = t.cancelAsked(); cr == nil {
		return nil, ""
	}
	switch {
	case beforeSend:
		phase = CancelPhaseBeforeSend
	case recovered || d.Polls > 0 || d.Resumes > 0 ||
		t.contPhase == continuation.ActivityRecovering || t.contPhase == continuation.ActivityContinuing:
		phase = CancelPhaseContinuation
	default:
		phase = CancelPhaseStreaming
	}
	return cr, phase
}

// cancelStart decides, at the start of an attempt whose record is built,
// what a cancel does: a turn never sent ends here (end); one that may have
// reached Letta goes on, and its run is cancelled once its thread is known.
func (t *turn) cancelStart(ctx context.Context, intents []Intent) (err error, end bool) {
	cr := t.cancelAsked()
	if cr == nil {
		return nil, false
	}
	if len(liveIntents(intents)) == 0 && t.rec.RunID == "" {
		return t.endCancelled(ctx, t.log, *cr, CancelPhaseWaiting, ""), true
	}
	t.cx.mu.Lock()
	t.cx.recovered = t.rec.RunID != ""
	t.cx.mu.Unlock()
	t.log.Info("the turn was cancelled while it may have reached Letta: its run is cancelled, never sent again")
	return nil, false
}

// endCancelled ends the turn cancelled: the final event (error, permanent,
// stop_reason cancelled, text what the agent had said), the journal
// (outcome cancelled, TurnRecord.Cancel) and the task's result (outcome
// cancelled): the task completes, never retried. A cancel is a normal
// ending, not a failure (an archived task counts in Asynq's failed
// metrics). The conversation is released with the journal's save.
func (t *turn) endCancelled(ctx context.Context, log *slog.Logger, cr CancelRecord, phase, text string) error {
	t.cx.mu.Lock()
	t.cx.ended = true
	t.cx.mu.Unlock()
	dctx, cancel := t.w.deliveryCtx(ctx)
	defer cancel()
	cr.Phase = phase
	t.mu.Lock()
	runID := t.rec.RunID
	t.mu.Unlock()
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID, Otid: t.otid, RunID: runID, MessageID: t.msg.MessageID,
		Text: text, StopReason: StopReasonCancelled, Permanent: true}
	if len(t.followers) > 0 {
		ev.AnsweredBy = t.taskID
	}
	t.answerEnded(dctx, log, true)
	if emitted, err := t.finalEvent(dctx, ev); err != nil {
		t.redisFailed()
		log.Warn("could not emit the cancelled event", "error", err.Error())
	} else if !emitted {
		log.Info("final event already written by an earlier attempt")
	}
	t.finishFollowers(dctx, ev)
	now := time.Now()
	t.mu.Lock()
	a := t.attempt()
	if a.End.IsZero() {
		a.End = now.UTC()
	}
	a.Outcome, a.Error = OutcomeCancelled, ""
	t.rec.Outcome, t.rec.Error, t.rec.StopReason, t.rec.FinishedAt, t.rec.Cancel = OutcomeCancelled, "", StopReasonCancelled, now.UTC(), &cr
	if text != "" {
		t.rec.PartialAnswer = cutText(text, maxPartialAnswer)
	}
	t.mu.Unlock()
	if err := t.save(dctx, append(t.resultOps(OutcomeCancelled, text, nil), t.releaseOps()...)...); err != nil {
		log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	log.Info("turn cancelled", "outcome", OutcomeCancelled, "phase", phase, "by", cr.By, "answer_bytes", len(text))
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	t.w.turnCancelled(t.queue, phase)
	t.obs.TurnFinished(t.queue, OutcomeCancelled, t.latency(now), t.rec.TTFT)
	return nil
}

// cancelWaiting ends a cancelled turn that is not its chat's turn (its
// attempt holds no lease and has no record yet): never sent, it leaves the
// line with its final event and a journal record saying cancelled.
func (t *turn) cancelWaiting(ctx context.Context, nyt error) error {
	w := t.w
	t.wakeAfterDeadHeads(ctx, nyt)
	dctx, cancel := w.deliveryCtx(ctx)
	defer cancel()
	cr := *t.cancelAsked()
	cr.Phase = CancelPhaseWaiting
	t.cx.mu.Lock()
	t.cx.ended = true
	t.cx.mu.Unlock()
	ev := ReplyEvent{Type: EventError, TaskID: t.taskID, Otid: t.otid, MessageID: t.msg.MessageID,
		StopReason: StopReasonCancelled, Permanent: true}
	if _, err := w.replies.EmitAnswerOnce(dctx, t.msg.Conversation, ev); err != nil {
		return t.retryEarly(fmt.Errorf("write the cancelled event: %w", err))
	}
	rec := t.storedRecord(dctx)
	now := time.Now().UTC()
	rec.Attempts = append(rec.Attempts, Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: t.start.UTC(),
		End: now, Outcome: OutcomeCancelled})
	rec.Outcome, rec.StopReason, rec.FinishedAt, rec.Error, rec.Cancel = OutcomeCancelled, StopReasonCancelled, now, "", &cr
	t.rec = rec
	if err := w.journal.Save(dctx, rec); err != nil {
		t.redisFailed()
		t.log.Warn("could not journal the cancelled turn", "error", err.Error())
	}
	if err := w.waker().leave(dctx, t.queue, t.key, t.taskID); err != nil {
		t.redisFailed()
		t.log.Warn("could not take the cancelled turn out of its conversation's line", "error", err.Error())
	}
	t.writeResult(OutcomeCancelled, "", nil)
	t.log.Info("turn cancelled", "outcome", OutcomeCancelled, "phase", CancelPhaseWaiting, "by", cr.By)
	t.obs.AttemptFinished(t.queue, "done", time.Since(t.start))
	w.turnCancelled(t.queue, CancelPhaseWaiting)
	t.obs.TurnFinished(t.queue, OutcomeCancelled, t.latency(now), 0)
	return nil // completed with the cancelled result: a normal ending, not a failure
}

// turnCancelled tells the observer of a cancelled turn (CancelObserver).
func (w *Worker) turnCancelled(queue, phase string) {
	if o, ok := w.obs.(CancelObserver); ok {
		o.TurnCancelled(queue, phase)
	}
}
