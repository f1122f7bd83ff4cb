package queue

import (
	"context"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/takeover"
)

// completer applies the end of an attempt: the final event (and the merged
// messages' final events), the journal's record, the task's result, the
// release of the conversation or the park in its line, the approval's
// record and the request's news, the metrics, and what Asynq is told (the
// handler's error). attempt.EndOf decides how a run's attempt ends (ran); the
// attempt's other ends (it could not start, it waits, it was merged or
// cancelled, an earlier attempt delivered) are its other methods.
//
// It holds the parts the attempt holds (assemble makes it in newTurn) and
// calls back into none of the turn's methods: an end needs the attempt's
// identity (a copy), its record writer (the record, the progress queue, the
// runner's fence, the worker, the log: save, redisFailed), its place in its
// line, its approvals, its cancel, its takeover registration, its ids and
// its observer.
type completer struct {
	attemptID
	*recordWriter
	obs  *attempt.Observed
	ids  *attempt.IDs
	line *line.Place
	ap   *approval.Turn
	cx   *cancel.Turn
	tk   *takeover.Registration
}

// deliveryCtx is for writes that must happen even when the attempt's
// context has ended (the final event, the journal), bounded by the budget's
// delivery allowance.
func (w *Worker) deliveryCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.cfg.Budget.DeliveryAllowance)
}

// finalEvent writes the attempt's final event once per turn (see
// Replies.EmitAnswerOnce) after its progress, in one round trip; no
// progress event of the attempt follows it.
func (c *completer) finalEvent(ctx context.Context, ev ReplyEvent) (emitted bool, err error) {
	if ev.Type == "" {
		ev.Type = EventAnswer
	}
	defer c.progress.EndEvents()
	pe, err := c.progress.Prepare(ev, c.w.replies.answeredKey(ev.TaskID))
	if err != nil {
		return false, err
	}
	if err := c.progress.Do(ctx, []*progress.Event{pe}); err != nil {
		return false, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err)
	}
	return pe.Written(), nil
}

// finishFollowers writes the final event of every merged message: ev's
// kind, naming this turn in answered_by (an answer carries no text: the
// text is in this turn's answer).
func (c *completer) finishFollowers(ctx context.Context, ev ReplyEvent) {
	for _, f := range c.line.Followers() {
		fe := ReplyEvent{Type: ev.Type, TaskID: f.TaskID, Otid: c.otid, RunID: ev.RunID, MessageID: f.MessageID,
			StopReason: ev.StopReason, Permanent: ev.Permanent, AnsweredBy: c.taskID, Tool: ev.Tool}
		if ev.Type == EventError {
			fe.Text = "the turn this message was merged into failed: " + ev.Text
		}
		if _, err := c.w.replies.EmitAnswerOnce(ctx, f.Conversation, fe); err != nil {
			c.redisFailed()
			c.log.Warn("could not emit the merged message's final event", "merged_task", f.TaskID, "error", err.Error())
		}
	}
}

// finished marks the record finished with outcome.
func (c *completer) finished(outcome, stopReason string) time.Time {
	now := time.Now()
	c.jr.Lock()
	c.jr.Current().Outcome = outcome
	c.jr.Rec().Outcome, c.jr.Rec().FinishedAt, c.jr.Rec().StopReason, c.jr.Rec().Error = outcome, now.UTC(), stopReason, ""
	c.jr.Unlock()
	return now
}

// storedRecord is the turn's journal record as stored (a new one when it
// has none, or it cannot be read), with the turn's identity filled in: for
// an attempt that ends the turn before it has a record of its own.
func (c *completer) storedRecord(ctx context.Context) *TurnRecord {
	rec, err := c.w.journal.Get(ctx, c.taskID)
	if err != nil {
		rec = &TurnRecord{}
	}
	rec.TaskID, rec.Otid, rec.AgentID = c.taskID, c.otid, c.msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = c.msg.Conversation, c.msg.MessageID, c.queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = c.msg.EnqueuedAt
	}
	return rec
}

// noRetryLeft is outOfRetries for this attempt (with the worker's
// IsFailure, ordering's too).
func (c *completer) noRetryLeft(err error) bool {
	if c.w.isFailure(err) {
		return c.retried+1 >= c.maxRetry
	}
	return c.retried >= c.maxRetry
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
