package queue

import (
	"strings"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// Agent-initiated messages: a scheduled job or a tool on the agent's side
// writes into a chat of its own accord, answering no user message.
// Client.Notify puts the text into the chat's reply stream as one event of
// type notify (docs/reply-events.md, "A notify"), which a relay shows as a
// message of its own, once. The caller names the message with a key: a
// notify sent again with the same key (the caller retried, or go-redis
// sent the script again after a lost reply) is the same one event.

// Notice is a message to write into a chat.
type Notice struct {
	// Chat is the conversation whose reply stream takes the message.
	Chat record.Conversation `json:"chat"`
	// Text is the message, as the chat shows it.
	Text string `json:"text"`
	// Key names the message (its idempotency key): 1 to 128 of the
	// characters A-Z a-z 0-9 - . _ ~ (e.g. "digest-2026-12-02", or a
	// random UUID, kept to send the notice again if the first call's
	// outcome is not known). A notify with a key already written into the
	// same chat (within RepliesOptions.TTL, 7 days by default) writes
	// nothing; a key is scoped to its chat.
	Key string `json:"key"`
}

// NotifyResult says what Notify did: the event's stream entry, and whether
// an earlier call with the same key wrote it (Duplicate).
type NotifyResult struct {
	// TaskID is the event's task id, "notify:<key>".
	TaskID string `json:"task_id"`
	// ID is the stream entry id of the event (the one written first, for a
	// duplicate).
	ID string `json:"id"`
	// Key is the notice's key.
	Key string `json:"key"`
	// Duplicate is true when an earlier call with this key wrote the
	// event: nothing was written now.
	Duplicate bool `json:"duplicate"`
}

// Validate checks n. The error is a *ValidationError naming the field at
// fault: "chat", "text" or "key".
func (n Notice) Validate() error {
	c := n.Chat
	for _, p := range []struct{ what, v string }{{"integration", c.Integration}, {"chat id", c.ChatID}} {
		switch {
		case p.v == "":
			return invalid("chat", "has no %s (want integration:chat_id)", p.what)
		case len(p.v) > MaxIDBytes:
			return invalid("chat", "%s is %d bytes, more than %d", p.what, len(p.v), MaxIDBytes)
		case !utf8.ValidString(p.v):
			return invalid("chat", "%s is not valid UTF-8", p.what)
		}
		for i, r := range p.v {
			if payloadcheck.IsControl(r) {
				return invalid("chat", "%s holds the control character %U at byte %d", p.what, r, i)
			}
		}
	}
	if strings.ContainsAny(c.Integration, ": \t\r\n") {
		return invalid("chat", "integration %q must not contain ':' or whitespace", c.Integration)
	}
	switch {
	case strings.TrimSpace(n.Text) == "":
		return invalid("text", "must not be empty (nor only white space)")
	case len(n.Text) > MaxNotifyTextBytes:
		return invalid("text", "is %d bytes, more than the limit of %d", len(n.Text), MaxNotifyTextBytes)
	case !utf8.ValidString(n.Text):
		return invalid("text", "is not valid UTF-8")
	case strings.IndexByte(n.Text, 0) >= 0:
		return invalid("text", "holds a NUL character (U+0000) at byte %d, which chat platforms refuse", strings.IndexByte(n.Text, 0))
	}
	return checkNotifyKey(n.Key)
}

// checkNotifyKey checks a notify key (see Notice.Key).
func checkNotifyKey(k string) error {
	switch {
	case k == "":
		return invalid("key", "must not be empty: choose one per message (e.g. a random UUID) and send it again with a retry")
	case len(k) > MaxNotifyKeyBytes:
		return invalid("key", "is %d bytes, more than %d", len(k), MaxNotifyKeyBytes)
	}
	for i, r := range k {
		if !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '-' || r == '.' || r == '_' || r == '~') {
			return invalid("key", "%q holds %q at byte %d: a key is made of A-Z a-z 0-9 - . _ ~", k, r, i)
		}
	}
	return nil
}
