package continuation

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// This file holds what is particular to turns sent to a Letta conversation
// (Turn.ConversationID set): background sends the server deduplicates by
// otid, resume through the conversation's stream endpoint (by run id, or by
// otid when the run is not known), the history of the conversation rather
// than the agent's, and the two 409s of a locked thread: busy and pending
// approval.

// pendingApprovalReason is the Reason of a turn refused because the agent
// waits for an approval.
const pendingApprovalReason = "the agent is waiting for approval of a tool call; answer the pending approval request before sending new messages"

// sendRequest is the request of one send of t.
func (r *Runner) sendRequest(t *Turn) agentclient.SendRequest {
	return agentclient.SendRequest{AgentID: t.AgentID, Text: t.Text, Otid: t.Otid, SenderID: t.SenderID,
		ConversationID: t.ConversationID, Images: t.Images, Approvals: t.Approvals,
		// A conversation send is always background: its otid is then mapped
		// to its run for 3 h, so that a resend replays the run instead of
		// starting another, and the run can be resumed by otid.
		Background: r.b.Background || t.ConversationID != ""}
}

// conflict handles a 409 from a send: pending approval ends the turn
// (permanent), busy with a run of this turn's otid follows that run, busy
// with another run is Busy. handled is false for any other error.
func (r *Runner) conflict(ctx context.Context, t Turn, st *agentclient.StreamState, h Hooks, err error) (d Result, handled bool) {
	switch {
	case agentclient.IsPendingApproval(err):
		return Result{Outcome: Rejected, Err: err, Sends: 1, Evidence: EvidenceNone, Retryable: false,
			Reason: pendingApprovalReason + " (" + err.Error() + ")"}, true
	case !agentclient.IsBusy(err):
		return Result{}, false
	}
	holder := agentclient.BusyRunID(err)
	log := r.logFor(h).With(slog.String("otid", t.Otid), slog.String("run_id", holder))
	// The admission phase's window bounds the look (the send did not
	// get a stream, so none of the stream's time was spent).
	loop := r.b.AdmissionLoop(time.Now())
	loop.Rand = r.cfg.Rand
	var mine bool
	var lerr error
	lookups := 0
	if holder != "" {
		mine, lerr = r.runCarriesOtid(ctx, loop, holder, t.Otid)
	}
	if holder == "" || lerr != nil && ctx.Err() == nil {
		// The newer busy form names no run (or the named run could not be
		// read): find out by the otid whether the thread's history holds
		// this turn's message, and its run.
		var sd Result
		id, found, serr := r.searchOnce(ctx, loop, t, &sd)
		lookups, lerr = 1, serr
		switch {
		case found && id != "":
			holder, mine = id, true
			log = log.With(slog.String("run_id", holder))
		case found:
			log.Info("thread busy; this turn's message is stored but names no run yet")
			return Result{Outcome: StillRunning, Err: err, Sends: 1, Lookups: lookups, Evidence: EvidenceHistory,
				Reason: "the thread is busy and this turn's message is stored, its run not known yet"}, true
		}
	}
	if mine {
		log.Info("thread busy with this turn's own run: following it")
		st.SetRunID(holder)
		d := Result{Evidence: EvidenceHistory, RunID: holder, Sends: 1, Lookups: lookups}
		announce(h, ActivityContinuing)
		c := r.follow(ctx, t, st, h, d)
		return c, true
	}
	if lerr != nil && ctx.Err() == nil {
		log.Warn("could not look for the busy thread's run", "error", lerr.Error())
	}
	log.Info("thread busy with another run: the turn waits", "retry_after", agentclient.RetryAfter(err).String())
	return Result{Outcome: Busy, Err: err, Sends: 1, Lookups: lookups, Evidence: EvidenceNone, Retryable: true,
		Reason: fmt.Sprintf("the agent's thread is busy with run %s", orUnknown(holder))}, true
}

func orUnknown(s string) string {
	if s == "" {
		return "(not named)"
	}
	return s
}

// runCarriesOtid reports whether the run's user message has otid.
func (r *Runner) runCarriesOtid(ctx context.Context, loop *budget.Loop, runID, otid string) (bool, error) {
	rctx, cancel := loop.RequestContext(ctx)
	defer cancel()
	msgs, err := r.c.ListRunMessages(rctx, runID, agentclient.ListOptions{Limit: 20, Order: "asc"})
	if err != nil {
		return false, err
	}
	for _, m := range msgs {
		if carriesOtid(m, otid) {
			return true, nil
		}
	}
	return false, nil
}

// listHistory lists the thread the turn was sent to: its conversation's
// messages, or the agent's.
func (r *Runner) listHistory(ctx context.Context, t Turn, o agentclient.ListOptions) ([]agentclient.Message, error) {
	if t.ConversationID != "" {
		return r.c.ListConversationMessages(ctx, t.ConversationID, t.AgentID, o)
	}
	return r.c.ListAgentMessages(ctx, t.AgentID, o)
}

// resume re-attaches to the run's stream: the conversation's stream
// endpoint for a conversation turn, the run's otherwise.
func (r *Runner) resume(ctx context.Context, t Turn, runID string, seq int64, st *agentclient.StreamState, opts agentclient.StreamOptions) error {
	if t.ConversationID != "" {
		return r.c.ResumeConversationStream(ctx, agentclient.ConversationResumeRequest{ConversationID: t.ConversationID,
			AgentID: t.AgentID, RunID: runID, StartingAfter: seq}, st, opts)
	}
	return r.c.ResumeStream(ctx, agentclient.ResumeRequest{RunID: runID, StartingAfter: seq}, st, opts)
}

// resumeByOtid asks the conversation for the run of the turn's otid (the
// server's map of background sends) and follows its stream. done reports a
// result; otherwise the caller goes on with what st learned (a run id
// from the stream's first ping) or, with none, the history search. The
// resume is bounded by loop, the follow's window, which the caller goes on
// using.
func (r *Runner) resumeByOtid(ctx context.Context, t Turn, st *agentclient.StreamState, h Hooks, d *Result, loop *budget.Loop) (Result, bool) {
	clocks := r.Clocks()
	clocks.Total = loop.Clamp(r.b.StreamTotal)
	clocks.Connect = loop.Clamp(r.b.ConnectTimeout)
	if clocks.Total <= 0 || clocks.Connect <= 0 {
		return Result{}, false
	}
	opts := r.streamOpts(h)
	opts.Clocks = clocks
	// The stream's first event names the run: from there the turn follows it.
	inner, found := opts.OnEvent, false
	opts.OnEvent = func(ev agentclient.Event) {
		if !found && st.RunID() != "" {
			found = true
			announce(h, ActivityContinuing)
		}
		if inner != nil {
			inner(ev)
		}
	}
	seq, _ := st.LastSeq()
	d.Resumes++
	wctx, cancel := loop.Context(ctx) // the window's deadline bounds the whole resume
	err := r.c.ResumeConversationStream(wctx, agentclient.ConversationResumeRequest{ConversationID: t.ConversationID,
		AgentID: t.AgentID, Otid: t.Otid, StartingAfter: seq}, st, opts)
	cancel()
	log := r.logFor(h).With(slog.String("otid", t.Otid), slog.String("run_id", st.RunID()))
	switch {
	case (err == nil || st.StopReason() != "" && ctx.Err() == nil && !agentclient.IsProtocolError(err)) && st.RunID() != "":
		dd := *d
		dd.Evidence = EvidenceStream
		return r.fromStopReason(dd, st.RunID(), st.StopReason(), st), true
	case ctx.Err() != nil:
		dd := *d
		dd.Outcome, dd.Err, dd.Reason = Interrupted, err, "interrupted while resuming by otid"
		if dd.Err == nil {
			dd.Err = ctx.Err()
		}
		dd.RunID, dd.Evidence = st.RunID(), evidenceOf(st)
		return dd, true
	case agentclient.IsNotFound(err):
		log.Info("the server has no run for the otid; searching the thread's history")
	case err != nil:
		var se *agentclient.StreamError
		if !errors.As(err, &se) {
			d.TransientErrors++
		}
		log.Warn("resume by otid ended without the run's end", "error", err.Error())
	}
	return Result{}, false
}
