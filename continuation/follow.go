package continuation

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// stopReasons is WIRE.md's table of stop reasons: what each means for the
// turn. It is the one table both paths judge a run's end by (the turn's own
// stream, and the follow: a resumed stream or the polled run). A failure
// ends the turn Failed naming the reason, whatever text came before it (that
// text is kept in the state, and goes with the error as cut); retryable
// failures are those a later, identical request could avoid (transient LLM
// or server trouble); the rest (an invalid tool call, an answer past its
// token limit, a context overflow, credits, cancelled) would fail the same
// way.
var stopReasons = map[string]struct {
	outcome   Outcome
	retryable bool
}{
	"end_turn":             {Completed, false},
	"max_steps":            {Completed, false},
	"tool_rule":            {Completed, false},
	"requires_approval":    {Completed, false},
	"error":                {Failed, true},
	"llm_api_error":        {Failed, true},
	"invalid_llm_response": {Failed, true},
	"invalid_tool_call":    {Failed, false},
	"no_tool_call":         {Failed, true},
	"max_tokens_exceeded":  {Failed, false},
	"context_window_overflow_in_system_prompt": {Failed, false},
	"insufficient_credits":                     {Failed, false},
	"cancelled":                                {Failed, false},
}

// judgeStop is the outcome of a run that ended with stop reason stop, from
// stopReasons. A stop reason this version does not know is a failure (not
// retryable): the run ended in a way nobody checked, so its text is not
// delivered as the answer. An empty one (the run ended, no reason known) is
// a retryable failure.
func judgeStop(stop string) (o Outcome, retryable bool, reason string) {
	if e, ok := stopReasons[stop]; ok {
		switch {
		case e.outcome == Completed:
			return Completed, false, "run completed: " + stop
		case stop == "cancelled":
			return Failed, false, "run was cancelled"
		}
		return Failed, e.retryable, "run failed: " + stop
	}
	if stop == "" {
		return Failed, true, "run ended without a stop reason"
	}
	return Failed, false, "run stopped with a stop reason this version does not know: " + stop
}

// fromStopReason turns a run's stop reason into a result (judgeStop).
func (r *Runner) fromStopReason(d Result, runID, stop string, st *agentclient.StreamState) Result {
	d.RunID, d.StopReason = runID, stop
	if st != nil {
		if err := st.LimitErr(); err != nil {
			return protocolFailed(d, err, st)
		}
	}
	d.Outcome, d.Retryable, d.Reason = judgeStop(stop)
	if d.Outcome == Failed && st != nil {
		if e := st.Snapshot().Error; e != nil {
			d.Reason = failureText(d.Reason, stop, e.ErrorType, e.Message)
		}
	}
	return d
}

// failureText is reason with the run's error, each fact said once: the error's message, its
// type unless the message names it, and the stop reason unless it is the generic "error" or
// the text names it already. A stop "error" with an internal_error "simulated error
// (internal_error)" reads "run failed: simulated error (internal_error)", not "run failed:
// error (internal_error: simulated error (internal_error))".
func failureText(reason, stop, errType, msg string) string {
	msg = strings.TrimSpace(msg)
	if errType != "" && !strings.Contains(msg, errType) {
		if msg == "" {
			msg = errType
		} else {
			msg = errType + ": " + msg
		}
	}
	if msg == "" {
		return reason
	}
	text := strings.TrimSuffix(reason, ": "+stop) + ": " + msg
	if stop != "" && stop != "error" && !strings.Contains(text, stop) {
		text += " (stop reason " + stop + ")"
	}
	return text
}

// stopFromRun maps a finished run to a stop reason, trusting stop_reason
// over status (async runs report completed for failures too).
func stopFromRun(run *agentclient.Run) string {
	if run.StopReason != "" {
		return run.StopReason
	}
	switch run.Status {
	case agentclient.RunCompleted:
		return "end_turn"
	case agentclient.RunCancelled:
		return "cancelled"
	case agentclient.RunFailed:
		return "error"
	}
	return ""
}

// follow resumes the run's stream (background runs, when enabled) or polls
// it, merging what arrives into st, until the run ends or ContinuationMax.
func (r *Runner) follow(ctx context.Context, t Turn, st *agentclient.StreamState, h Hooks, d Result) Result {
	loop := r.b.FollowLoop(time.Now())
	loop.Rand = r.cfg.Rand
	return r.followWithin(ctx, t, st, h, d, loop)
}

// followWithin is follow within a window already opened.
func (r *Runner) followWithin(ctx context.Context, t Turn, st *agentclient.StreamState, h Hooks, d Result, loop *budget.Loop) Result {
	log := r.logFor(h).With(slog.String("otid", t.Otid), slog.String("run_id", d.RunID))

	// The stream may already have ended the run (stop_reason seen, body cut
	// after): then only the tail of the messages is missing.
	if stop := st.StopReason(); stop != "" {
		r.drain(ctx, loop, st, h, d.RunID, &d)
		return r.fromStopReason(d, d.RunID, stop, st)
	}

	tryResume := r.b.Resume
	cursor := st.PollCursor()
	for {
		if ctx.Err() != nil {
			d.Outcome, d.Err, d.Reason = Interrupted, ctx.Err(), "interrupted while following the run"
			return d
		}
		if loop.Done() {
			d.Outcome = StillRunning
			d.Reason = "continuation budget (" + r.b.ContinuationMax.String() + ") spent; run still active"
			return d
		}
		rctx, cancel := loop.RequestContext(ctx)
		run, err := r.c.GetRun(rctx, d.RunID)
		cancel()
		d.Polls++
		if err != nil {
			if agentclient.Classify(err) == agentclient.Permanent {
				d.Outcome, d.Err, d.Retryable = Failed, err, false
				d.Reason = "run cannot be followed: " + err.Error()
				return d
			}
			d.TransientErrors++
			log.Warn("poll failed, will retry", "error", err.Error())
			_ = sleep(ctx, loop, agentclient.RetryAfter(err))
			continue
		}
		if run.Active() && tryResume && run.Background {
			tryResume = false // one resume per follow; polling after that
			seq, _ := st.LastSeq()
			d.Resumes++
			clocks := r.Clocks()
			clocks.Total = loop.Clamp(r.b.StreamTotal)
			clocks.Connect = loop.Clamp(r.b.ConnectTimeout)
			if clocks.Total <= 0 || clocks.Connect <= 0 {
				continue
			}
			opts := r.streamOpts(h)
			opts.Clocks = clocks
			// The window's deadline bounds the whole resume: connect, then
			// total from the first byte, would each fit what remains, but
			// not both.
			wctx, cancel := loop.Context(ctx)
			err := r.resume(wctx, t, d.RunID, seq, st, opts)
			cancel()
			if err == nil {
				return r.fromStopReason(d, d.RunID, st.StopReason(), st)
			}
			if agentclient.IsProtocolError(err) {
				return protocolFailed(d, err, st)
			}
			if stop := st.StopReason(); stop != "" && ctx.Err() == nil {
				// The run's end came before the window closed on the body.
				return r.fromStopReason(d, d.RunID, stop, st)
			}
			if agentclient.Classify(err) == agentclient.Canceled {
				continue
			}
			switch agentclient.StatusCode(err) {
			case http.StatusBadRequest, http.StatusGone, http.StatusServiceUnavailable:
				d.ResumeRefused = true
			}
			log.Warn("resume ended without the run's end, polling", "error", err.Error())
			cursor = st.PollCursor()
			if agentclient.IsSeqGap(err) {
				// Chunks are missing between what the stream gave and what
				// the resume did: read the run's messages from its start
				// (merging is idempotent), which are whole.
				cursor = ""
			}
			continue
		}
		// Poll the run's new messages (also after it ended: the tail).
		n, next, perr := r.pollMessages(ctx, loop, st, h, d.RunID, cursor)
		cursor = next
		if pe := protocolErr(perr, st); pe != nil {
			return protocolFailed(d, pe, st)
		}
		if perr != nil {
			d.TransientErrors++
		}
		if !run.Active() {
			if perr != nil {
				if ctx.Err() == nil && !loop.Done() {
					// The run ended but its tail was not read: try again.
					_ = sleep(ctx, loop, agentclient.RetryAfter(perr))
					continue
				}
				if ctx.Err() != nil {
					d.Outcome, d.Err, d.Reason = Interrupted, ctx.Err(), "interrupted while reading the ended run's messages"
					return d
				}
				// Whatever the transcript holds is not the whole answer: the
				// next attempt reads the messages (PriorIntent), never sends.
				d.Outcome, d.Err = StillRunning, perr
				d.Reason = "run ended (" + orUnknown(stopFromRun(run)) + ") but its messages could not all be read within the continuation budget (" +
					r.b.ContinuationMax.String() + "): " + perr.Error()
				return d
			}
			stop := st.StopReason()
			if stop == "" {
				stop = stopFromRun(run)
			}
			return r.fromStopReason(d, d.RunID, stop, st)
		}
		if n > 0 {
			loop.ResetBackoff()
		}
		_ = sleep(ctx, loop, agentclient.RetryAfter(perr))
	}
}

// errPollCut: the follow's window closed after a full page of the run's
// messages, so the pages after it are unread.
var errPollCut = errors.New("the continuation window closed with the run's messages read only in part")

// errPollStuck: the server answered a full page of the run's messages with
// nothing after the cursor (it ignores `after`), and a page large enough
// to hold the whole run could not be had: the messages past it are unread.
var errPollStuck = errors.New("the run's messages server did not page past the cursor, and the run does not fit in one page")

// Page sizes of a poll of the run's messages: the usual one, and the
// largest one asked for from a server that ignores the cursor (the whole
// run in one page).
const (
	pollPage    = 100
	pollPageMax = 1600
)

// pollMessages reads the run's messages after cursor, page by page, merging
// them as complete messages, in their own order (inPosition). It returns
// how many messages were new to the state and the new cursor. A cursor the
// server does not know (404) falls back to the run's start: merging is
// idempotent, so re-reading costs bytes, never duplicates. A full page with
// nothing after the cursor (a server that ignores `after`) is not asked for
// again: the poll asks for the run in one larger page (up to pollPageMax),
// and says errPollStuck when even that does not hold it.
func (r *Runner) pollMessages(ctx context.Context, loop *budget.Loop, st *agentclient.StreamState, h Hooks, runID, cursor string) (int, string, error) {
	page := pollPage
	fresh := 0
	given := map[string]bool{} // ids this poll was given
	grownFrom, shrunk := 0, false
	for {
		rctx, cancel := loop.RequestContext(ctx)
		msgs, err := r.c.ListRunMessages(rctx, runID, agentclient.ListOptions{After: cursor, Limit: page, Order: "asc"})
		cancel()
		if err != nil && cursor != "" && agentclient.IsNotFound(err) {
			cursor = ""
			continue
		}
		if err != nil && page > 1 && errors.Is(err, agentclient.ErrResponseTooLarge) {
			// Big messages (long tool returns): a smaller page fits, and
			// only one message over the limit is the server's fault.
			page /= 2
			shrunk = true
			continue
		}
		if err != nil {
			return fresh, cursor, err
		}
		now := time.Now()
		st.SetTranscriptLimit(r.c.Limits().Transcript)
		moved := false
		for _, m := range inPosition(msgs) {
			id := m.Base().ID
			known := id == "" || st.HasMessage(id)
			u := st.Apply(m, true, now)
			if !known && st.HasMessage(id) {
				fresh++
			}
			if h.OnEvent != nil {
				h.OnEvent(agentclient.Event{Message: m, Update: u})
			}
			if id != "" {
				if !given[id] {
					given[id], moved = true, true
				}
				cursor = id
			}
		}
		switch {
		case !moved && grownFrom > 0 && len(msgs) <= grownFrom:
			// A larger page came back no longer, with nothing new: the
			// server caps the page too. Its short length is no end.
			return fresh, cursor, errPollStuck
		case len(msgs) < page:
			return fresh, cursor, nil
		case !moved:
			// A full page of what this poll was given already: the server
			// ignores `after`. Asking again would get the same page; ask
			// for the whole run in one.
			if shrunk || page >= pollPageMax {
				return fresh, cursor, errPollStuck
			}
			grownFrom, page = page, min(page*4, pollPageMax)
			continue
		}
		if loop.Done() {
			// A full page: there may be more, and the window has closed.
			return fresh, cursor, errPollCut
		}
	}
}

// inPosition orders a page of a run's messages by their own position (date,
// else seq_id), not the list's: a server may list a page newest first
// whatever order was asked (WIRE.md: the order inside a page is not
// reliable). Messages of one date (the parts of one message: its reasoning,
// then its tool call or text) keep the list's order.
func inPosition(msgs []agentclient.Message) []agentclient.Message {
	if len(msgs) < 2 {
		return msgs
	}
	dates := make([]time.Time, len(msgs))
	dated, numbered := true, true
	for i, m := range msgs {
		c := m.Base()
		ts, err := time.Parse(time.RFC3339Nano, c.Date)
		dates[i], dated = ts, dated && err == nil
		numbered = numbered && c.SeqID != nil
	}
	if !dated && !numbered {
		return msgs
	}
	before := func(a, b int) bool {
		if dated && !dates[a].Equal(dates[b]) {
			return dates[a].Before(dates[b])
		}
		return numbered && *msgs[a].Base().SeqID < *msgs[b].Base().SeqID
	}
	idx := make([]int, len(msgs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case before(a, b):
			return -1
		case before(b, a):
			return 1
		}
		return 0
	})
	out := make([]agentclient.Message, len(msgs))
	for i, j := range idx {
		out[i] = msgs[j]
	}
	return out
}

// drain reads what the run stored after the stream ended (bounded by the
// loop), so the transcript is whole.
func (r *Runner) drain(ctx context.Context, loop *budget.Loop, st *agentclient.StreamState, h Hooks, runID string, d *Result) {
	if runID == "" || loop.Done() {
		return
	}
	_, _, err := r.pollMessages(ctx, loop, st, h, runID, st.PollCursor())
	d.Polls++
	if err != nil && !errors.Is(err, context.Canceled) {
		d.TransientErrors++
	}
}
