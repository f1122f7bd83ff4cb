package attempt

import (
	"context"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/approval"
)

// ran ends the attempt whose run at Letta decided: the record gets what
// the run left, endOf decides how the attempt ends, and the end is applied.
func (c *completer) ran(ctx context.Context, r *runEnd) error {
	w := c.w
	d, snap := r.D, &r.Snap
	dctx, cancel := w.deliveryCtx(ctx)
	defer cancel()
	now := time.Now()

	c.jr.Lock()
	a := c.jr.Current()
	a.End = now.UTC()
	a.Polls, a.Resumes = d.Polls, d.Resumes
	if d.Clock != "" {
		a.TimeoutClock = string(d.Clock)
	}
	switch d.Resend {
	case continuation.ResendSent:
		a.ResendDecision = record.ResendSent
		c.jr.Rec().Resends++
	case continuation.ResendForbidden:
		a.ResendDecision = record.ResendForbidden
	case continuation.ResendNotNeeded:
		a.ResendDecision = record.ResendNotNeeded
	}
	for _, id := range []string{d.RunID, snap.RunID} {
		if id != "" {
			c.jr.Rec().RunID = id
			c.ids.setRunID(id)
			break
		}
	}
	for _, id := range snap.Transcript.DuplicateToolCallIDs() {
		c.jr.Rec().Warnings = appendUnique(c.jr.Rec().Warnings, "tool_call_id "+id+" seen on two calls")
	}
	if u := snap.Usage; u != nil {
		c.jr.Rec().Usage = &record.Usage{PromptTokens: int(u.PromptTokens), CompletionTokens: int(u.CompletionTokens),
			TotalTokens: int(u.TotalTokens), StepCount: int(u.StepCount)}
	}
	if len(r.Tools) > 0 {
		c.jr.Rec().Tools = c.jr.Rec().Tools[:0]
		for _, call := range r.Tools {
			ts := record.ToolSummary{Name: call.Name, CallID: call.CallID, Status: call.Status}
			if !call.Called.IsZero() && !call.Returned.IsZero() {
				ts.Duration = call.Returned.Sub(call.Called)
			}
			if ts.Status == "" {
				ts.Status = "unanswered"
			}
			c.jr.Rec().Tools = append(c.jr.Rec().Tools, ts)
		}
	}
	if c.jr.Rec().TTFT == 0 && !r.FirstToken.IsZero() && !c.jr.Rec().EnqueuedAt.IsZero() {
		c.jr.Rec().TTFT = r.FirstToken.Sub(c.jr.Rec().EnqueuedAt)
	}
	c.jr.Unlock()

	switch {
	case d.Clock == agentclient.ClockConnect || d.Clock == agentclient.ClockStall || d.Clock == agentclient.ClockTotal:
		w.Obs.StreamTimeout(string(d.Clock))
	}
	if d.Polls > 0 || d.Resumes > 0 {
		w.Obs.Continuation(d.Polls, d.Resumes)
	}
	if d.Resend == continuation.ResendSent || d.Resend == continuation.ResendForbidden {
		w.Obs.Resend(string(a.ResendDecision))
	}
	// "outcome" on the lines below is the journal's word for how the attempt ended
	// (answered, failed, retrying, …), set where it is decided.
	log := c.log.With(slog.String("otid", c.Otid), slog.String("run_id", c.jr.Rec().RunID),
		slog.String("clock", string(d.Clock)), slog.Int("polls", d.Polls), slog.Int("resumes", d.Resumes),
		slog.String("resend", string(d.Resend)))

	c.jr.Lock()
	busyInARow := 0
	for i := len(c.jr.Rec().Attempts) - 2; i >= 0 && c.jr.Rec().Attempts[i].Outcome == record.OutcomeBusy; i-- {
		busyInARow++
	}
	c.jr.Unlock()
	in := endingInput{D: d, RunID: snap.RunID, Retried: c.Retried, MaxRetry: c.MaxRetry, BusyInARow: busyInARow,
		StuckRetryDelay: w.Cfg.StuckRetryDelay, Cancelled: r.Cancel != nil, Cause: r.Cause}
	e := endOf(in)
	if e.Outcome == record.OutcomeCancelled {
		r.Finish(false)
		return c.endCancelled(dctx, log, *r.Cancel, r.CancelPhase, snap.Answer)
	}
	r.Finish(e.Final == record.EventAnswer)
	if d.Outcome == continuation.Refused && agentclient.RetryAfter(d.Err) > MaxServerRetryAfter {
		log.Warn("Retry-After beyond the cap: not obeyed", "retry_after", agentclient.RetryAfter(d.Err).String(),
			"cap", MaxServerRetryAfter.String())
	}
	if e.Refusal && (d.Outcome == continuation.Rejected || d.Outcome == continuation.Refused) {
		c.jr.Lock()
		n := c.jr.Current().N
		c.jr.Unlock()
		if err := w.Journal.RecordRefusal(dctx, c.TaskID, c.Otid, n, w.Cfg.WorkerID); err != nil {
			c.RedisFailed()
			log.Warn("could not journal the refusal; the next attempt looks for the otid first", "error", err.Error())
		}
	}

	switch {
	case e.Final == record.EventApprovalRequired:
		tool := &record.ToolEvent{Status: record.ToolStatusCall}
		calls := approval.Calls(snap.Transcript)
		if len(calls) > 0 {
			tool = &calls[len(calls)-1]
		}
		ae, err := c.ap.Ask(dctx, log, calls)
		if err != nil {
			return c.retryLater(dctx, log, endRetryOf(in, time.Second, "record the approval request: "+err.Error()))
		}
		return c.Deliver(dctx, log, e.Outcome, record.ReplyEvent{Type: record.EventApprovalRequired, Tool: tool,
			StopReason: e.StopReason, Approval: ae}, snap.Answer, tool)

	case e.Final == record.EventAnswer:
		return c.Deliver(dctx, log, e.Outcome, record.ReplyEvent{Type: record.EventAnswer, Text: snap.Answer,
			StopReason: e.StopReason}, snap.Answer, nil)

	case e.Asynq == endPutBack, d.Outcome == continuation.Busy:
		return c.busy(dctx, e)

	case e.GaveUp:
		return c.retryLater(dctx, log, e)

	case e.Final == record.EventError:
		if d.Outcome == continuation.Failed {
			if snap.Answer != "" {
				// Text the agent gave before it failed: kept, cut, never
				// delivered as the answer.
				c.jr.Lock()
				c.jr.Rec().PartialAnswer = cutText(snap.Answer, maxPartialAnswer)
				c.jr.Unlock()
			}
			if d.StopReason == "cancelled" {
				for _, s := range snap.Transcript.UnansweredToolCalls() {
					c.jr.Rec().Warnings = appendUnique(c.jr.Rec().Warnings, "tool "+s.ToolName+" ("+s.ToolCallID+") unanswered when the run was cancelled")
				}
			}
		}
		if d.Outcome == continuation.Rejected {
			e.Reason = r.ImageNote + e.Reason
		}
		return c.fail(dctx, log, e.Reason, e.StopReason)
	}
	return c.retryLater(dctx, log, e)
}
