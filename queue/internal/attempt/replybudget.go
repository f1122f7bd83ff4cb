package attempt

import (
	"log/slog"
	"sync/atomic"

	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/record"
)

// progressBytes is the text a progress event carries.
func progressBytes(ev record.ReplyEvent) int {
	n := len(ev.Text)
	if ev.Tool != nil {
		n += len(ev.Tool.Arguments) + min(len(ev.Tool.Return), MaxToolReturnBytes)
	}
	return n
}

// replyBudget is an attempt's allowance of progress text on its chat's
// reply stream (MaxReplyBytes): see take.
type replyBudget struct {
	max  int64
	used atomic.Int64     // progress text counted so far
	log  *slog.Logger     // warned once, when the bound is reached
	jr   *journal.Attempt // its record notes the drop
}

// set bounds the budget at max bytes; log and jr note when it is reached.
func (b *replyBudget) set(max int64, log *slog.Logger, jr *journal.Attempt) {
	b.max, b.log, b.jr = max, log, jr
}

// take counts a progress event's text against the budget and returns the
// event to write, or false to drop it. Events without text (phases)
// always pass. The answer_delta that crosses the bound is cut to what is
// left of it (at a rune boundary); later text events are dropped, with one
// warning in the log and the journal: a hostile or runaway agent server
// cannot fill the reply stream. The final event (deliver, fail) is not a
// progress event: it carries the answer, which the transcript limit
// bounds.
func (b *replyBudget) take(ev record.ReplyEvent) (record.ReplyEvent, bool) {
	n := progressBytes(ev)
	if n == 0 {
		return ev, true
	}
	max := b.max
	used := b.used.Add(int64(n))
	if used <= max {
		return ev, true
	}
	before := used - int64(n)
	if before >= max {
		return ev, false
	}
	b.log.Warn("reply stream limit reached: later progress text of this attempt is dropped",
		"limit_bytes", max, "setting", "LETTAQ_MAX_REPLY_BYTES")
	b.jr.Lock()
	if b.jr.Rec() != nil {
		b.jr.Rec().Warnings = appendUnique(b.jr.Rec().Warnings, "progress text past LETTAQ_MAX_REPLY_BYTES dropped")
	}
	b.jr.Unlock()
	if ev.Type != record.EventAnswerDelta {
		return ev, false
	}
	ev.Text = codec.CutUTF8(ev.Text, int(max-before))
	return ev, ev.Text != ""
}
