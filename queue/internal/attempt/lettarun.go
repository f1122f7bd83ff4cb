package attempt

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/live"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
	"github.com/lettaq/lettaq/queue/record"
)

// lettaRun is an attempt's run at Letta: its work context (the room
// delivery needs before Asynq's deadline, ended by the lease's loss), its
// Letta conversation, the checks before each send (fenced, cancelled, the
// intent to send journaled), the stream's state, what the chat is told
// while the run goes on (live.Stream), and the run's decision, with which
// it ends the attempt (finish).
//
// The attempt makes it once its start is done (prepare) and holds it. What
// must live while the stream waits for the agent lives here, on the heap,
// not in a frame: the goroutine waits right under the handler (see
// Parts.Process), and Resume goes on from this state.
type lettaRun struct {
	runParts

	thread runThread // the thread key as the start read it (until resolved)
	spec   continuation.Turn
	hooks  continuation.Hooks
	dec    continuation.Result
	// While the stream waits for the agent: the work context and its
	// cancel.
	wctx    context.Context
	wcancel context.CancelFunc
	st      *agentclient.StreamState
	view    live.Stream // the chat's view of the run: phases, answer text, tool calls
}

// errPending: the run's stream waits for the agent (see Parts.Process); the
// run goes on with Resume.
var errPending = errors.New("lettaq: the turn waits for the agent")

// runParts is what a run is given when it is made: the worker's parts it
// uses and the attempt's parts it shares (its record's saves and its
// completer among them).
type runParts struct {
	Runner   *continuation.Runner
	Cfg      *Config // its Budget, HeartbeatInterval, DeltaMaxAge, WorkerID
	Threads  *Threads
	Journal  intents
	Replies  *store.Replies
	OneRedis bool // the journal is on the replies' Redis: the intent goes with the attempt's queued writes

	Msg      *inbound.Message
	IDs      *IDs
	Log      *slog.Logger
	Dctx     context.Context // the attempt's context without its cancellation
	Line     *line.Place     // the lease: its loss ends the work context
	Jr       *journal.Attempt
	Tk       *takeover.Registration
	Cx       *cancel.Turn
	Ca       cancel.Attempt // the attempt as its cancel's checks see it
	Progress *progress.Queue
	Rec      *recordWriter // the attempt's record saves: now (Save) or queued (saveLater)
	End      *completer    // applies how the attempt ends, given what the run left (ran)
}

// runThread is the chat's thread key as the attempt's start read it
// (store.StartReads.ThreadRead): known, the conversation id it held; read,
// whether it was read.
type runThread struct {
	Known string
	Read  bool
}

// newLettaRun makes the run of spec on thread: its stream state (with the
// run id the journal has) and its live view, started with out (the
// attempt's progress events, which the run gives the run id).
func newLettaRun(p runParts, spec continuation.Turn, thread runThread, runID string, out func(record.ReplyEvent, bool)) *lettaRun {
	r := &lettaRun{runParts: p, thread: thread, spec: spec}
	r.st = agentclient.NewStreamState()
	r.st.SetRunID(runID)
	r.view.Start(spec.Started, p.Cfg.HeartbeatInterval, p.Cfg.DeltaMaxAge, func(ev record.ReplyEvent, lazy bool) {
		ev.RunID = r.st.RunID()
		out(ev, lazy)
	}, p.Jr.Mark)
	r.hooks = continuation.Hooks{
		Logger:     p.Log,
		OnEvent:    r.onEvent,
		OnActivity: r.onPhase,
		BeforeSend: r.beforeSend,
	}
	return r
}

// execute resolves the run's Letta conversation, then runs it. ctx is the
// attempt's context (Asynq's); with ordering, workContext ends the run
// when the lease is lost.
func (r *lettaRun) execute(ctx context.Context) error {
	wctx, cancel := r.workContext(ctx)
	convID, err := r.resolveThread(wctx)
	r.thread = runThread{} // resolved: not kept while the turn waits
	if err != nil {
		r.view.StopHeartbeat()
		err = r.threadFailed(ctx, err)
		cancel()
		return err
	}
	r.spec.ConversationID = convID
	r.wctx, r.wcancel = wctx, cancel
	r.Cx.ThreadKnown(convID, r.Ca, r.Log)
	return r.step(ctx)
}

// resume waits for the stream that waits for the agent, then goes on:
// errPending again when it waits again.
func (r *lettaRun) resume(ctx context.Context) error {
	r.st.Wait()
	return r.step(ctx)
}

// step runs the turn at Letta until its stream waits for the agent
// (errPending) or the run is decided, then ends the
func (r *lettaRun) step(ctx context.Context) error {
	if r.Runner.Run(r.wctx, &r.spec, r.st, &r.hooks, &r.dec) {
		return errPending
	}
	defer r.wcancel()
	r.wctx = nil
	r.view.StopHeartbeat()
	return r.decided(ctx)
}

// decided ends the attempt with the run's decision (its copy lives in this
// frame, not in step's).
func (r *lettaRun) decided(ctx context.Context) error { return r.finish(ctx, r.dec) }

// threadFailed ends the attempt whose thread could not be resolved (see
// threadUnresolved; the decision lives in this frame, not in execute's).
func (r *lettaRun) threadFailed(ctx context.Context, err error) error {
	return r.finish(ctx, threadUnresolved(ctx, err))
}

// finish ends the attempt with the run's decision d: what the run leaves
// (runEnd) goes to the attempt's completer, which decides how the attempt
// ends (endOf) and applies it.
func (r *lettaRun) finish(ctx context.Context, d continuation.Result) error {
	if r.Tk.TakenOver(ctx) {
		return r.Tk.EndTakenOver() // fenced: another worker continues the turn
	}
	e := runEnd{D: d, Snap: r.st.Snapshot(), Tools: r.view.Tools(), FirstToken: r.view.FirstToken(), Finish: r.view.Finish}
	e.Cancel, e.CancelPhase = r.Cx.Decided(d, r.view.Activity())
	if d.Outcome == continuation.Interrupted {
		e.Cause = r.leaseCause(ctx)
	}
	if d.Outcome == continuation.Rejected {
		e.ImageNote = r.imageRejected(d, "")
	}
	return r.End.ran(ctx, &e)
}

// workContext is ctx less the room that delivery needs before Asynq's
// deadline, and, with ordering, cancelled when the turn's lease is lost
// (leaseCause then names the loss).
func (r *lettaRun) workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok && r.Line.Lease() == nil {
		return ctx, func() {}
	}
	var wctx context.Context
	var cancel context.CancelFunc
	if ok {
		b := &r.Cfg.Budget
		wctx, cancel = context.WithDeadline(ctx, dl.Add(-b.DeliveryAllowance-b.SafetyMargin/2))
	} else {
		wctx, cancel = context.WithCancel(ctx)
	}
	if r.Line.Lease() == nil {
		return wctx, cancel
	}
	stop := r.Line.Lease().AfterLost(cancel)
	return wctx, func() {
		stop()
		cancel()
	}
}

// leaseCause is why ctx (an attempt's context) ended: its cause, or
// ordering.ErrLeaseLost when the turn's lease was lost (the work context
// is cancelled then, not ctx: see workContext); nil while neither.
func (r *lettaRun) leaseCause(ctx context.Context) error {
	if cause := context.Cause(ctx); cause != nil {
		return cause
	}
	if lease := r.Line.Lease(); lease != nil {
		return lease.Err()
	}
	return nil
}

// resolveThread returns the run's Letta conversation: the one an earlier
// attempt journaled (a turn stays on the thread it was sent to), else the
// one the mode gives. It journals the choice with the intent to send, at
// the latest.
func (r *lettaRun) resolveThread(ctx context.Context) (string, error) {
	r.Jr.Lock()
	prev, mode := r.Jr.Rec().LettaConversationID, r.Jr.Rec().ThreadMode
	r.Jr.Unlock()
	if mode != "" && (prev != "" || ThreadMode(mode) == ThreadAgent) && r.Msg.LettaConversationID == "" {
		return prev, nil
	}
	id, ok := r.Threads.local(*r.Msg, r.thread.Known)
	if !ok {
		var err error
		if id, err = r.resolveRemote(ctx); err != nil {
			return "", err
		}
	}
	mode = string(r.Threads.Mode)
	if r.Msg.LettaConversationID != "" {
		mode = "explicit"
	}
	r.Jr.Lock()
	r.Jr.Rec().ThreadMode, r.Jr.Rec().LettaConversationID = mode, id
	r.Jr.Unlock()
	// Journaled before the send (the queued save goes with the intent at
	// the latest): a retry looks for the otid in this thread, whatever the
	// mode is by then.
	r.Rec.saveLater()
	return id, nil
}

// resolveRemote is resolveThread's call to Redis and Letta, bounded by the
// budget's phase for it (made only then: the usual turn needs no timer).
func (r *lettaRun) resolveRemote(ctx context.Context) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, r.Cfg.Budget.ThreadResolution()) // a phase of the task timeout
	defer cancel()
	var keep func(store.Op)
	if r.OneRedis { // the thread key is on the replies' client, the writer's
		keep = r.Progress.PushOp
	}
	return r.Threads.resolveKnown(rctx, *r.Msg, r.thread.Known, r.thread.Read, keep)
}

// beforeSend is the check before every send: the attempt is not fenced,
// the turn not cancelled, and its intent to send is journaled (with no
// other attempt's intent since this one looked).
func (r *lettaRun) beforeSend(ctx context.Context, resend bool) error {
	if r.Tk.TakenOver(ctx) {
		return takeover.ErrTakenOver // fenced: another worker continues the turn
	}
	r.Jr.Lock()
	n := r.Jr.Current().N
	r.Jr.Unlock()
	if err := r.Cx.BeforeSend(r.Dctx, false, r.Ca); err != nil {
		return err
	}
	// The intent goes with everything the attempt queued before it (its
	// journal record, the accepted event, progress): one round trip, which
	// reads the turn's cancel record too.
	var prior []record.Intent
	var cancelled bool
	taskID, otid := r.IDs.TaskID, r.IDs.Otid
	if r.OneRedis {
		op, err := r.Journal.IntentOp(taskID, otid, n, r.Cfg.WorkerID, &prior)
		if err != nil {
			return err
		}
		if err := r.Progress.Do(ctx, nil, r.Replies.CancelReadOp(taskID, &cancelled), op); err != nil {
			return err
		}
		if err := r.Cx.BeforeSend(r.Dctx, cancelled, r.Ca); err != nil {
			return err
		}
	} else {
		if _, cancelled, _ = r.Replies.GetCancel(ctx, taskID); cancelled {
			return r.Cx.BeforeSend(r.Dctx, true, r.Ca)
		}
		var err error
		if prior, err = r.Journal.RecordIntent(ctx, taskID, otid, n, r.Cfg.WorkerID); err != nil {
			return err
		}
	}
	prior = journal.LiveIntents(prior)
	r.Jr.Lock()
	r.Jr.Current().SentOtid = true
	r.Jr.Unlock()
	if !resend && len(prior) > 0 {
		// Another attempt journaled an intent since this one looked: it may
		// have sent. Do not send; the retry looks for the otid first.
		return fmt.Errorf("lettaq: attempt %d of task %s found a concurrent intent to send", n, taskID)
	}
	return nil
}

// saveRunID journals the run id the first time it is known, so that a
// crash from here on still leaves it for the next
func (r *lettaRun) saveRunID() {
	id := r.st.RunID()
	if id == "" || id == r.IDs.runIDNow() {
		return
	}
	r.IDs.setRunID(id)
	r.Jr.Lock()
	r.Jr.Rec().RunID = id
	r.Jr.Unlock()
	r.Rec.saveLater() // off the stream's reader, with the next progress events
	r.Cx.RunKnown(r.Ca, r.Log)
}

func (r *lettaRun) onPhase(p continuation.Activity) {
	r.view.OnActivity(p)
	switch p {
	case continuation.ActivityRecovering, continuation.ActivityContinuing, continuation.ActivityResending:
		// Journal the way the attempt took (and the run id, once known), so
		// that a crash from here on leaves both.
		if id := r.st.RunID(); id != "" && id != r.IDs.runIDNow() {
			r.saveRunID()
			return
		}
		ctx, cancel := context.WithTimeout(r.Dctx, 5*time.Second)
		defer cancel()
		if err := r.Rec.Save(ctx); err != nil {
			r.Log.Warn("could not journal the phase", "phase", string(p), "error", err.Error())
		}
	}
}

func (r *lettaRun) onEvent(ev agentclient.Event) {
	r.saveRunID()
	r.view.OnEvent(ev, r.st)
}

// imageRejected: a 400 refusing a message with images is the server
// failing to fetch one; the error names the URLs.
func (r *lettaRun) imageRejected(d continuation.Result, reason string) string {
	if len(r.Msg.Images) == 0 || agentclient.StatusCode(d.Err) != 400 {
		return reason
	}
	if urls := inbound.ImageURLs(r.Msg.Images); urls != "" {
		return "the server could not use the message's images (" + urls + "): " + reason
	}
	return reason
}
