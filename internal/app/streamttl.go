package app

import (
	"fmt"
	"time"
)

// The reply streams' retention: LETTAQ_JOURNAL_RETENTION and
// LETTAQ_REPLY_STREAM_TTL, read by every command that writes reply events
// (the worker; enqueue and the relay for the accepted, notify and cancel
// events they write themselves) with the worker's parsing and defaults, so that a stream
// is kept as long whoever wrote to it last.

// replyStreamTTLOf reads the two settings from their raw values ("": the
// default) and returns the reply streams' TTL as queue.RepliesOptions.StreamTTL
// takes it (negative: never).
func replyStreamTTLOf(journalRetention, replyStreamTTL string) (time.Duration, error) {
	var c WorkerSettings
	for _, s := range workerSettings {
		raw := ""
		switch s.Name {
		case "LETTAQ_JOURNAL_RETENTION":
			raw = journalRetention
		case "LETTAQ_REPLY_STREAM_TTL":
			raw = replyStreamTTL
		default:
			continue
		}
		if raw == "" {
			raw = s.Default
		}
		if err := s.apply(&c, raw); err != nil {
			return 0, fmt.Errorf("%s=%q: %v", s.Name, raw, err)
		}
	}
	if c.replyStreamTTLFollows {
		c.ReplyStreamTTL = c.JournalRetention
	}
	return c.repliesStreamTTL(), nil
}

// repliesStreamTTL is c's ReplyStreamTTL as queue.RepliesOptions.StreamTTL
// takes it: the setting's 0 is never, the library's its default.
func (c WorkerSettings) repliesStreamTTL() time.Duration {
	if c.ReplyStreamTTL == 0 {
		return -1
	}
	return c.ReplyStreamTTL
}

// checkRetentionSetting checks raw as the worker's setting name (one of the
// two above) takes it.
func checkRetentionSetting(name, raw string) error {
	for _, s := range workerSettings {
		if s.Name == name {
			return s.apply(&WorkerSettings{}, raw)
		}
	}
	return fmt.Errorf("no worker setting %s", name)
}
