package continuation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// Outcome is what became of a turn.
type Outcome int

const (
	// Completed: the run ended with a completed stop reason (end_turn,
	// max_steps, tool_rule, requires_approval). The answer is in the state.
	Completed Outcome = iota + 1
	// Failed: the run ended with a failure stop reason, or was cancelled.
	// Result.Retryable says whether sending the message again could help;
	// lettaq never does that on its own (it would be a second message).
	Failed
	// StillRunning: the budget ran out while the run was alive (or the
	// message was admitted but its run is not known yet). The next attempt
	// must follow this run, never send again.
	StillRunning
	// NotAdmitted: no run id and no message with the turn's otid in the
	// agent's history after the admission grace. Only here may the message
	// be sent again, with the same otid, if policy allows.
	NotAdmitted
	// Rejected: the server refused the message with a permanent error
	// (unknown agent, validation, insufficient credits). Nothing was stored.
	Rejected
	// Interrupted: the caller's context ended (shutdown, deadline). The
	// state keeps what was learned; the next attempt continues from it.
	Interrupted
	// Busy: the thread is held by another run (a busy 409 that does not
	// name a run of this turn's otid). Nothing was stored. Retry later
	// (after the error's Retry-After, else a backoff); it is no failure of
	// the turn and no resend: the next send is the first the server saw.
	Busy
	// Refused: the server refused the send and said it stored nothing (a
	// 503 "cloud_api_shutting_down" with "admitted": false while Letta
	// Cloud deploys, or a 429 of Letta's own API rate limit). Send again,
	// same otid, after the error's Retry-After, without looking for the
	// otid first: the server said it is not there.
	Refused
)

func (o Outcome) String() string {
	switch o {
	case Completed:
		return "completed"
	case Failed:
		return "failed"
	case StillRunning:
		return "still_running"
	case NotAdmitted:
		return "not_admitted"
	case Rejected:
		return "rejected"
	case Interrupted:
		return "interrupted"
	case Busy:
		return "busy"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Evidence is what proves that the message was admitted.
type Evidence string

const (
	// EvidenceNone: nothing shows the server stored the message.
	EvidenceNone Evidence = "none"
	// EvidenceStream: the stream (or an earlier attempt's state) named the run.
	EvidenceStream Evidence = "stream"
	// EvidenceHistory: the otid was found in the agent's history.
	EvidenceHistory Evidence = "history"
)

// ResendVerdict is what the gate (the only road to a second send) decided.
type ResendVerdict string

const (
	ResendNotNeeded ResendVerdict = "not_needed"
	ResendSent      ResendVerdict = "resent"
	ResendForbidden ResendVerdict = "forbidden"
)

// Result is what running a turn came to: its Outcome, and what was learned
// and done on the way.
type Result struct {
	Outcome    Outcome
	RunID      string
	StopReason string
	// Retryable (on Failed and Rejected) says whether the same message
	// could succeed later.
	Retryable bool
	// BackOff (on NotAdmitted): the send was refused by the model's rate
	// limit (429 llm_rate_limit), so the gate did not send again at once:
	// the next attempt does, after a backoff, once it has looked for the
	// otid.
	BackOff  bool
	Evidence Evidence
	Resend   ResendVerdict
	// Reason explains the outcome in one line, for logs and errors.
	Reason string
	// Err is the error behind Rejected, Interrupted, or a Failed lookup.
	Err error
	// Clock is the stream clock that ended the first read, if any.
	Clock agentclient.Clock
	// Sends counts messages sent in this call (0, 1 or 2).
	Sends            int
	Lookups, Polls   int
	Resumes          int
	ResumeRefused    bool
	TransientErrors  int
	SearchedMessages int
}

// Activity is what the runner is doing for the turn, reported through
// Hooks.OnActivity.
type Activity string

const (
	ActivityConnecting Activity = "connecting" // sending, no byte yet
	ActivityStreaming  Activity = "streaming"  // reading the turn's stream
	ActivityRecovering Activity = "recovering" // stream lost: finding the run
	ActivityContinuing Activity = "continuing" // following the run (resume or poll)
	ActivityResending  Activity = "resending"  // not admitted: sending again, same otid
	// ActivityRateLimited: Letta refused a request with 429 (its API rate
	// limit, or the model's): the turn waits before it tries again.
	ActivityRateLimited Activity = "rate_limited"
	// ActivityLettaDeploying: Letta Cloud answered 503 "cloud_api_shutting_down"
	// (it deploys): the turn waits for its Retry-After, then sends again.
	ActivityLettaDeploying Activity = "letta_deploying"
)

// Hooks observe a turn. All are optional.
type Hooks struct {
	// Logger, when set, is the turn's logger (the queue's carries the task
	// id); the Runner's otherwise.
	Logger *slog.Logger
	// OnEvent receives stream events and polled messages (as Events whose
	// Update tells what changed), after the state was updated.
	OnEvent func(agentclient.Event)
	// OnIdle: only pings for a while; the agent is still thinking.
	OnIdle func(time.Duration)
	// OnActivity is told when the runner moves to another activity.
	OnActivity func(Activity)
	// BeforeSend runs right before every send (the first and a resend):
	// journal the intent there. An error aborts the send.
	BeforeSend func(ctx context.Context, resend bool) error
}

// Turn is one user message and what is known of earlier attempts.
type Turn struct {
	AgentID  string
	Otid     string
	Text     string
	SenderID string
	// ConversationID, when set, is the Letta conversation the turn is sent
	// to ("default" or conv-…): sends are background (deduplicated by otid
	// at the server), resumes and history go through the conversation.
	// Empty: the agent endpoints.
	ConversationID string
	// Started is when the turn was first attempted; the history search
	// does not page back past messages much older than this.
	Started time.Time
	// PriorIntent is true when an earlier attempt journaled an intent to
	// send: the otid is looked for before anything may be sent.
	PriorIntent bool
	// Images go with Text as content parts.
	Images []agentclient.Image
	// Approvals, when set, make the turn the answer to an approval request
	// (Text and Images empty): sent, followed and found in history by its
	// otid like a message.
	Approvals []agentclient.ApprovalAnswer
}

// carriesOtid reports whether m is the turn's own message in history: its
// user message, or its approval answer.
func carriesOtid(m agentclient.Message, otid string) bool {
	switch m := m.(type) {
	case *agentclient.UserMessage:
		return m.Otid == otid
	case *agentclient.ApprovalResponseMessage:
		return m.Otid == otid
	}
	return false
}

// Config configures a Runner.
type Config struct {
	Client *agentclient.Client
	Budget budget.Config
	Logger *slog.Logger
	// Rand draws jitter (tests); nil uses math/rand/v2.
	Rand func() float64
	// HistoryPageSize for the otid search (default 50).
	HistoryPageSize int
	// HistorySlack: how far before Turn.Started the search still looks
	// (clock skew between worker and server). Default 5 minutes.
	HistorySlack time.Duration
}

// Runner runs and continues turns. It is safe for concurrent use.
type Runner struct {
	c   *agentclient.Client
	b   budget.Config
	log *slog.Logger
	cfg Config
}

// New checks the configuration and returns a Runner.
func New(cfg Config) (*Runner, error) {
	if cfg.Client == nil {
		return nil, errors.New("continuation: Config.Client is nil")
	}
	if err := cfg.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("continuation: budget: %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Rand == nil {
		cfg.Rand = rand.Float64
	}
	if cfg.HistoryPageSize <= 0 {
		cfg.HistoryPageSize = 50
	}
	if cfg.HistorySlack <= 0 {
		cfg.HistorySlack = 5 * time.Minute
	}
	return &Runner{c: cfg.Client, b: cfg.Budget, log: cfg.Logger, cfg: cfg}, nil
}

// logFor is the logger for lines about the turn of h.
func (r *Runner) logFor(h Hooks) *slog.Logger {
	if h.Logger != nil {
		return h.Logger
	}
	return r.log
}

// Clocks returns the stream clocks the budget sets.
func (r *Runner) Clocks() agentclient.Clocks {
	idle := r.b.ContentIdleNotice
	if idle == 0 {
		idle = -1
	}
	return agentclient.Clocks{Connect: r.b.ConnectTimeout, Stall: r.b.StallTimeout, Total: r.b.StreamTotal,
		ContentIdle: idle, StopGrace: r.b.StopGrace}
}

func (r *Runner) streamOpts(h Hooks) agentclient.StreamOptions {
	return agentclient.StreamOptions{Clocks: r.Clocks(), OnEvent: h.OnEvent, OnIdle: h.OnIdle}
}

// announce tells the hooks that the turn moved to activity a.
func announce(h Hooks, a Activity) {
	if h.OnActivity != nil {
		h.OnActivity(a)
	}
}

// Run drives a turn to its Result: send and stream it (unless an earlier
// attempt may have sent it, then look first), continue it when the stream
// is lost, and send again only when the gate allows it. st is the turn's
// state: pass the same one to every call for the same turn.
//
// Run returns pending true, leaving d alone, when the first send's stream
// has no bytes to read yet: the caller waits for the agent with st.Wait,
// then calls Run again with the same arguments, until Run returns false
// with d the turn's result. (Only a stream that can return early does:
// see agentclient.StreamOptions.Stepwise. A resend, a resume or a poll
// waits under the call.)
func (r *Runner) Run(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, d *Result) (pending bool) {
	// Why the first send returns early: a thinking turn's goroutine waits
	// for minutes, and the Go runtime halves a goroutine's stack only when
	// less than a quarter of it is in use. Waiting under the caller's frame
	// instead of under the stream's read path keeps it at 4 KiB instead of
	// 8 (integration/bench: "stacks per in-flight turn").
	if st.Pending() {
		err := r.c.ReadPending(ctx, st)
		if st.Pending() {
			return true
		}
		r.sent(ctx, t, st, h, err, d)
	} else {
		if t.PriorIntent || st.RunID() != "" || t.validate() != nil {
			r.lookFirst(ctx, t, st, h, d)
			return false
		}
		if r.send(ctx, t, st, h, false, true, d) {
			return true
		}
	}
	if d.Outcome == NotAdmitted {
		r.gate(ctx, t, st, h, d)
	}
	return false
}

// lookFirst runs a turn that must not be sent before its otid is looked
// for (or that is not valid).
func (r *Runner) lookFirst(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, d *Result) {
	if err := t.validate(); err != nil {
		*d = Result{Outcome: Rejected, Reason: err.Error(), Err: err, Evidence: EvidenceNone}
		return
	}
	*d = r.continueTurn(ctx, *t, st, *h)
	if d.Outcome == NotAdmitted {
		r.gate(ctx, t, st, h, d)
	}
}

func (t *Turn) validate() error {
	switch {
	case t.AgentID == "":
		return errors.New("continuation: turn has no agent id")
	case t.Otid == "":
		return errors.New("continuation: turn has no otid")
	case t.Text == "" && len(t.Images) == 0 && len(t.Approvals) == 0:
		return errors.New("continuation: turn has no text")
	case t.ConversationID != "" && !agentclient.ValidConversationID(t.ConversationID):
		return fmt.Errorf("continuation: conversation id %q: want %q or conv-<uuid4>", t.ConversationID, agentclient.DefaultConversation)
	}
	return nil
}

// gate is the only road to a second send. It is reached with a NotAdmitted
// result d, which is only ever made when the state has no run id and the
// otid was not found in history after the admission grace; it replaces d.
func (r *Runner) gate(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, d *Result) {
	prev := *d
	if prev.Outcome != NotAdmitted || prev.Evidence != EvidenceNone || st.RunID() != "" {
		panic("continuation: gate reached with evidence of admission") // unreachable by construction; tested
	}
	if prev.BackOff {
		// The model's rate limit refused the send: sending again at once
		// would meet it again. The next attempt looks, then sends.
		return
	}
	if !r.b.ResendPolicy.AllowsResend() {
		d.Resend = ResendForbidden
		d.Reason = fmt.Sprintf("%s: message with otid %s not admitted, and LETTAQ_RESEND_POLICY=%s forbids sending it again", prev.Reason, t.Otid, r.b.ResendPolicy)
		return
	}
	announce(*h, ActivityResending)
	*d = Result{}
	r.send(ctx, t, st, h, true, false, d)
	if d.Sends == 0 {
		// The resend's intent could not be journaled, so it was not sent:
		// the turn is where the first send left it, not admitted (or
		// interrupted). The queue retries it; the next attempt looks for
		// the otid first, then may resend.
		notResent := *d
		*d = prev
		d.Err = notResent.Err
		d.Reason = prev.Reason + "; not sent again: " + notResent.Reason
		if notResent.Outcome == Interrupted {
			d.Outcome = Interrupted
		}
		return
	}
	d.Resend = ResendSent
	d.Sends += prev.Sends
	d.Lookups += prev.Lookups
	d.Polls += prev.Polls
	d.TransientErrors += prev.TransientErrors
	if d.Clock == "" {
		d.Clock = prev.Clock
	}
}

// send streams one send of the message and continues it if the stream is
// lost; d is its result. With stepwise the stream may return early
// instead: pending says it did, and d is not written then (see Run).
func (r *Runner) send(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, resend, stepwise bool, d *Result) (pending bool) {
	if h.BeforeSend != nil {
		if err := h.BeforeSend(ctx, resend); err != nil {
			notSent(ctx, err, d)
			return false
		}
	}
	err := r.sendStream(ctx, t, st, h, stepwise)
	if st.Pending() {
		return true
	}
	r.sent(ctx, t, st, h, err, d)
	return false
}

// notSent is the result of a send whose intent could not be journaled.
func notSent(ctx context.Context, err error, d *Result) {
	if ctx.Err() != nil {
		*d = Result{Outcome: Interrupted, Err: err, Reason: "interrupted before send", Evidence: EvidenceNone}
		return
	}
	*d = Result{Outcome: Failed, Retryable: true, Err: err, Reason: "could not journal the intent to send: " + err.Error(), Evidence: EvidenceNone}
}

// sendStream sends the message and reads its stream; with stepwise, the
// stream may return early (st.Pending).
func (r *Runner) sendStream(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, stepwise bool) error {
	announce(*h, ActivityConnecting)
	sp := &streamActivity{h: h}
	opts := agentclient.StreamOptions{Clocks: r.Clocks(), OnEvent: sp.onEvent, OnIdle: h.OnIdle, Stepwise: stepwise}
	return r.c.SendStream(ctx, agentclient.SendRequest{AgentID: t.AgentID, Text: t.Text, Otid: t.Otid, SenderID: t.SenderID,
		ConversationID: t.ConversationID, Images: t.Images, Approvals: t.Approvals,
		Background: r.b.Background || t.ConversationID != ""}, st, opts)
}

// streamActivity passes a send's events on, telling the turn it is streaming
// at the first.
type streamActivity struct {
	h         *Hooks
	streaming bool
}

func (sp *streamActivity) onEvent(ev agentclient.Event) {
	if !sp.streaming {
		sp.streaming = true
		announce(*sp.h, ActivityStreaming)
	}
	if sp.h.OnEvent != nil {
		sp.h.OnEvent(ev)
	}
}

// sent decides what the send's outcome, err, means; when the stream was
// lost it continues the run.
func (r *Runner) sent(ctx context.Context, t *Turn, st *agentclient.StreamState, h *Hooks, err error, out *Result) {
	if cd, ok := r.conflict(ctx, *t, st, *h, err); ok {
		*out = cd
		return
	}
	if rd, ok := r.refusal(ctx, *t, *h, err); ok {
		*out = rd
		return
	}
	d := Result{Sends: 1}
	var sendErr error // a transient refusal of the send
	var se *agentclient.StreamError
	var ae *agentclient.Error
	switch {
	case err == nil:
		d.Evidence = EvidenceStream
		*out = r.fromStopReason(d, st.RunID(), st.StopReason(), st)
		return
	case agentclient.IsProtocolError(err):
		*out = protocolFailed(d, err, st)
		return
	case errors.As(err, &se):
		if se.Clock == agentclient.ClockCanceled {
			*out = Result{Outcome: Interrupted, Err: err, Reason: "interrupted while streaming", Sends: 1,
				RunID: st.RunID(), Evidence: evidenceOf(st)}
			return
		}
		d.Clock = se.Clock
		r.logFor(*h).LogAttrs(ctx, slog.LevelWarn, "stream lost, continuing the run",
			slog.String("otid", t.Otid), slog.String("run_id", st.RunID()), slog.String("clock", string(se.Clock)),
			slog.String("error", err.Error()))
	case errors.As(err, new(*agentclient.InvalidIDError)):
		// Refused before any request: nothing was sent, nothing to look for.
		*out = Result{Outcome: Rejected, Err: err, Evidence: EvidenceNone, Reason: "the message cannot be sent: " + err.Error()}
		return
	case errors.As(err, &ae) && agentclient.Classify(err) == agentclient.Permanent:
		*out = Result{Outcome: Rejected, Err: err, Sends: 1, Evidence: EvidenceNone,
			Reason:    "the agent server refused the message: " + err.Error(),
			Retryable: ae.StatusCode == http.StatusConflict}
		return
	case agentclient.Classify(err) == agentclient.Canceled:
		*out = Result{Outcome: Interrupted, Err: err, Reason: "interrupted while sending", Sends: 1, Evidence: evidenceOf(st)}
		return
	default:
		// 429, 5xx, connection failures: the message may have been stored
		// anyway. Look for it before anything else.
		d.TransientErrors++
		sendErr = err
		r.logFor(*h).LogAttrs(ctx, slog.LevelWarn, "send failed, looking for the otid before any resend",
			slog.String("otid", t.Otid), slog.String("run_id", st.RunID()), slog.String("error", err.Error()))
	}
	c := r.continueTurn(ctx, *t, st, *h)
	if sendErr != nil && c.Outcome == NotAdmitted && agentclient.RefusalOf(sendErr) == agentclient.RefusalModelRateLimit {
		// Not found: not sent again at once, the model is rate limited.
		c.BackOff = true
		c.Reason += "; the model is rate limited (llm_rate_limit): sending again after a backoff"
		announce(*h, ActivityRateLimited)
	}
	if sendErr != nil && c.Outcome != Completed {
		// Name the cause first: what the lookup found only follows from it.
		c.Reason = "send failed: " + sendErr.Error() + "; then " + c.Reason
	}
	c.Sends += d.Sends
	c.Clock = d.Clock
	c.TransientErrors += d.TransientErrors
	*out = c
}

func evidenceOf(st *agentclient.StreamState) Evidence {
	if st.RunID() != "" {
		return EvidenceStream
	}
	return EvidenceNone
}

// continueTurn resolves the turn's run (from the state, or by its otid in the
// agent's history) and follows it until it ends or the budget does. It never
// sends anything.
func (r *Runner) continueTurn(ctx context.Context, t Turn, st *agentclient.StreamState, h Hooks) Result {
	announce(h, ActivityRecovering)
	d := Result{Evidence: EvidenceNone}
	runID := st.RunID()
	var loop *budget.Loop // the follow's window, when a resume by otid opened it
	if runID == "" && t.ConversationID != "" {
		loop = r.b.FollowLoop(time.Now())
		loop.Rand = r.cfg.Rand
		if dd, done := r.resumeByOtid(ctx, t, st, h, &d, loop); done {
			return dd
		}
		runID = st.RunID()
	}
	if runID != "" {
		d.Evidence = EvidenceStream
	} else {
		found, admitted, searched, err := r.findRun(ctx, h, t, &d)
		switch {
		case agentclient.IsProtocolError(err):
			return protocolFailed(d, err, st)
		case ctx.Err() != nil:
			d.Outcome, d.Err, d.Reason = Interrupted, ctx.Err(), "interrupted while looking for the otid"
			return d
		case found != "":
			runID = found
			st.SetRunID(found)
			d.Evidence = EvidenceHistory
		case admitted:
			// The message is stored but names no run yet: never resend.
			d.Evidence = EvidenceHistory
			d.Outcome = StillRunning
			d.Reason = "message admitted but its run is not known yet"
			return d
		case errors.Is(err, errThreadNotFound):
			// The thread itself is gone (a conversation deleted, an agent
			// removed): nothing can be found in it, and a send to it would
			// be refused the same way.
			d.Outcome, d.Err, d.Retryable = Rejected, err, false
			d.Reason = "the turn's thread no longer exists: " + err.Error()
			return d
		case !searched:
			// The history could not be read: no evidence either way, so
			// no resend. The next attempt looks again.
			d.Outcome = StillRunning
			d.Reason = "could not search the agent's history for otid " + t.Otid
			if err != nil {
				d.Reason += ": " + err.Error()
			}
			d.Err = err
			return d
		default:
			d.Outcome = NotAdmitted
			d.Reason = fmt.Sprintf("no run id and otid %s not in the agent's history after %s", t.Otid, r.b.AdmissionGrace)
			if err != nil {
				d.Reason += " (last lookup error: " + err.Error() + ")"
			}
			return d
		}
	}
	d.RunID = runID
	announce(h, ActivityContinuing)
	if loop != nil {
		return r.followWithin(ctx, t, st, h, d, loop)
	}
	return r.follow(ctx, t, st, h, d)
}

// findRun looks for the user message carrying the turn's otid, newest
// first, paging back until found or past the turn's start, retrying for up
// to the admission grace (the server may store the message late). searched
// reports whether at least one search went through the history without an
// error: without one, "not found" proves nothing.
//
// While Letta refuses the lookups with 429, the turn's phase says it is
// rate limited (and recovering again once a lookup goes through).
func (r *Runner) findRun(ctx context.Context, h Hooks, t Turn, d *Result) (runID string, admitted, searched bool, lastErr error) {
	log := r.logFor(h)
	loop := r.b.AdmissionLoop(time.Now())
	loop.Rand = r.cfg.Rand
	limited := false
	for {
		id, found, err := r.searchOnce(ctx, loop, t, d)
		d.Lookups++
		if l := agentclient.StatusCode(err) == http.StatusTooManyRequests; l != limited {
			limited = l
			if l {
				announce(h, ActivityRateLimited)
			} else {
				announce(h, ActivityRecovering)
			}
		}
		if found {
			return id, true, true, nil
		}
		switch {
		case agentclient.IsProtocolError(err), errors.Is(err, errThreadNotFound):
			return "", false, searched, err
		case err == nil:
			searched = true
		case errors.Is(err, errSearchCut):
			// The window closed mid-search: that search proves nothing.
		default:
			lastErr = err
			d.TransientErrors++
			log.Warn("history lookup failed", "otid", t.Otid, "error", err.Error())
		}
		if loop.Done() || ctx.Err() != nil {
			return "", false, searched, lastErr
		}
		if err := sleep(ctx, loop, agentclient.RetryAfter(err)); err != nil {
			return "", false, searched, err
		}
	}
}

// errSearchCut: the admission window closed before a search was complete.
var errSearchCut = errors.New("admission grace ended mid-search")

// sleep waits the loop's next backoff, or longer when the server asked for
// it (Retry-After), never past the loop's window.
func sleep(ctx context.Context, loop *budget.Loop, retryAfter time.Duration) error {
	return loop.SleepAtLeast(ctx, retryAfter)
}

// errThreadNotFound: the history's first page was answered 404: the thread
// (the conversation, or the agent) does not exist any more. A 404 past the
// first page is a cursor the server does not know, not this.
var errThreadNotFound = errors.New("the thread's history was not found")

// errSearchStuck: the server answered a page with nothing the search had
// not seen (it ignores the cursor): the history was not searched through.
var errSearchStuck = errors.New("the history server did not page past the cursor: the search is incomplete")

// searchOnce pages back through the agent's history once, newest first.
// Cursors follow the sort order (OpenAPI: "messages that come after this
// message ID in the specified sort order"), so with order=desc the next,
// older page is the one after the oldest message seen. It stops at the
// end of the history, or at a page all older than the turn (less the
// slack): one old-dated row among newer ones (a message stored late, or
// with a date of its own) is no sign that the search went past the turn.
// A page shorter than the limit is the end of the history. A full page
// with nothing new (a server that ignores the cursor) is an incomplete
// search (errSearchStuck), never a complete one.
func (r *Runner) searchOnce(ctx context.Context, loop *budget.Loop, t Turn, d *Result) (runID string, found bool, err error) {
	cursor := ""
	floor := t.Started.Add(-r.cfg.HistorySlack)
	seen := map[string]bool{}
	size := r.cfg.HistoryPageSize
	for {
		if loop.Done() {
			return "", false, errSearchCut
		}
		rctx, cancel := loop.RequestContext(ctx)
		msgs, err := r.listHistory(rctx, t, agentclient.ListOptions{After: cursor, Limit: size, Order: "desc"})
		cancel()
		if err != nil && size > 1 && errors.Is(err, agentclient.ErrResponseTooLarge) {
			size /= 2 // big messages: a smaller page fits
			continue
		}
		if err != nil && cursor == "" && agentclient.IsNotFound(err) {
			return "", false, fmt.Errorf("%w: %w", errThreadNotFound, err)
		}
		if err != nil {
			return "", false, err
		}
		d.SearchedMessages += len(msgs)
		oldestID, oldest, newest, fresh := "", time.Time{}, time.Time{}, false
		for _, m := range msgs {
			c := m.Base()
			if carriesOtid(m, t.Otid) {
				return c.RunID, true, nil
			}
			if c.ID != "" && !seen[c.ID] {
				seen[c.ID], fresh = true, true
			}
			// A desc page may come oldest-first: find its oldest by date.
			if ts, perr := time.Parse(time.RFC3339Nano, c.Date); perr == nil {
				if oldestID == "" || ts.Before(oldest) {
					oldestID, oldest = c.ID, ts
				}
				if ts.After(newest) {
					newest = ts
				}
			} else if oldestID == "" {
				oldestID = c.ID
			}
		}
		if len(msgs) < size {
			// A page shorter than asked for is the end of the history,
			// whatever the cursor (a server that ignores it answers the
			// same short page again: it is the whole history).
			return "", false, nil
		}
		if oldestID == "" || oldestID == cursor || !fresh {
			return "", false, errSearchStuck
		}
		if !t.Started.IsZero() && !newest.IsZero() && newest.Before(floor) {
			return "", false, nil
		}
		cursor = oldestID
	}
}
