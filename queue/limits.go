package queue

// DefaultMaxReplyBytes bounds the progress text one attempt of a turn
// writes to its reply stream (WorkerConfig.MaxReplyBytes).
const DefaultMaxReplyBytes = 4 << 20

// progressBytes is the text a progress event carries.
func progressBytes(ev ReplyEvent) int {
	n := len(ev.Text)
	if ev.Tool != nil {
		n += len(ev.Tool.Arguments) + min(len(ev.Tool.Return), MaxToolReturnBytes)
	}
	return n
}

// replyAllowed counts a progress event's text against MaxReplyBytes and
// reports whether it may be written. Events without text (phases) always
// may; once the bound is passed, text events are dropped, with one warning
// and a journal warning: a hostile or runaway agent server cannot fill the
// reply stream. The final event (deliver, fail) is not a progress event:
// it carries the answer, which the transcript limit bounds.
func (t *turn) replyAllowed(ev ReplyEvent) bool {
	n := progressBytes(ev)
	if n == 0 {
		return true
	}
	max := int64(t.w.cfg.MaxReplyBytes)
	used := t.replyBytes.Add(int64(n))
	if used <= max {
		return true
	}
	if used-int64(n) <= max {
		// The first event past the bound: say so once.
		t.log.Warn("reply stream limit reached: later progress text of this attempt is dropped",
			"limit_bytes", max, "setting", "LETTAQ_MAX_REPLY_BYTES")
		t.mu.Lock()
		if t.rec != nil {
			t.rec.Warnings = appendUnique(t.rec.Warnings, "progress text past LETTAQ_MAX_REPLY_BYTES dropped")
		}
		t.mu.Unlock()
	}
	return false
}
