package attempt

import (
	"context"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/takeover"
	"github.com/lettaq/lettaq/queue/record"
)

// completer applies the end of an attempt: the final event (and the merged
// messages' final events), the journal's record, the task's result, the
// release of the conversation or the park in its line, the approval's
// record and the request's news, the metrics, and what Asynq is told (the
// handler's error). endOf decides how a run's attempt ends (ran); the
// attempt's other ends (it could not start, it waits, it was merged or
// cancelled, an earlier attempt delivered) are its other methods.
//
// It holds the parts the attempt holds (assemble makes it in newTurn) and
// calls back into none of the turn's methods: an end needs the attempt's
// identity (a copy), its record writer (the record, the progress queue, the
// runner's fence, the worker's parts, the log: Save, RedisFailed), its place in its
// line, its approvals, its cancel, its takeover registration, its ids and
// its observer.
type completer struct {
	ID
	*recordWriter
	w    *Parts
	obs  *observed
	ids  *IDs
	line *line.Place
	ap   *approval.Turn
	cx   *cancel.Turn
	tk   *takeover.Registration
}

// newCompleter is the completer of the attempt id: it shares the attempt's
// record writer and holds its parts.
func newCompleter(p *Parts, id ID, rw *recordWriter, obs *observed, ids *IDs, l *line.Place, ap *approval.Turn, cx *cancel.Turn,
	tk *takeover.Registration) *completer {
	return &completer{ID: id, recordWriter: rw, w: p, obs: obs, ids: ids, line: l, ap: ap, cx: cx, tk: tk}
}

// setStart moves the attempt's start (it holds its chat's line from then).
func (c *completer) setStart(t time.Time) { c.Start = t }

// deliveryCtx is for writes that must happen even when the attempt's
// context has ended (the final event, the journal), bounded by the budget's
// delivery allowance.
func (w *Parts) deliveryCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), w.Cfg.Budget.DeliveryAllowance)
}

// storedRecord is the turn's journal record as stored (a new one when it
// has none, or it cannot be read), with the turn's identity filled in: for
// an attempt that ends the turn before it has a record of its own.
func (c *completer) storedRecord(ctx context.Context) *record.TurnRecord {
	rec, err := c.w.Journal.Get(ctx, c.TaskID)
	if err != nil {
		rec = &record.TurnRecord{}
	}
	rec.TaskID, rec.Otid, rec.AgentID = c.TaskID, c.Otid, c.Msg.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = c.Msg.Conversation, c.Msg.MessageID, c.Queue
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = c.Msg.EnqueuedAt
	}
	return rec
}

// noRetryLeft is outOfRetries for this attempt (with the worker's
// IsFailure, ordering's too).
func (c *completer) noRetryLeft(err error) bool {
	if c.w.IsFailure(err) {
		return c.Retried+1 >= c.MaxRetry
	}
	return c.Retried >= c.MaxRetry
}

func appendUnique(s []string, v string) []string {
	for _, x := range s {
		if x == v {
			return s
		}
	}
	return append(s, v)
}

// maxPartialAnswer bounds record.TurnRecord.PartialAnswer (a failed turn's text).
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
