package queue

// progressBytes is the text a progress event carries.
func progressBytes(ev ReplyEvent) int {
	n := len(ev.Text)
	if ev.Tool != nil {
		n += len(ev.Tool.Arguments) + min(len(ev.Tool.Return), MaxToolReturnBytes)
	}
	return n
}

// replyBudget counts a progress event's text against MaxReplyBytes and
// returns the event to write, or false to drop it. Events without text
// (phases) always pass. The answer_delta that crosses the bound is cut to
// what is left of it (at a rune boundary); later text events are dropped,
// with one warning in the log and the journal: a hostile or runaway agent
// server cannot fill the reply stream. The final event (deliver, fail) is
// not a progress event: it carries the answer, which the transcript limit
// bounds.
func (t *turn) replyBudget(ev ReplyEvent) (ReplyEvent, bool) {
	n := progressBytes(ev)
	if n == 0 {
		return ev, true
	}
	max := int64(t.w.cfg.MaxReplyBytes)
	used := t.replyBytes.Add(int64(n))
	if used <= max {
		return ev, true
	}
	before := used - int64(n)
	if before >= max {
		return ev, false
	}
	t.log.Warn("reply stream limit reached: later progress text of this attempt is dropped",
		"limit_bytes", max, "setting", "LETTAQ_MAX_REPLY_BYTES")
	t.jr.Lock()
	if t.jr.Rec() != nil {
		t.jr.Rec().Warnings = appendUnique(t.jr.Rec().Warnings, "progress text past LETTAQ_MAX_REPLY_BYTES dropped")
	}
	t.jr.Unlock()
	if ev.Type != EventAnswerDelta {
		return ev, false
	}
	ev.Text = replyTruncateUTF8(ev.Text, int(max-before))
	return ev, ev.Text != ""
}
