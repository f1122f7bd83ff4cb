package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lettaq/lettaq/queue/record"
)

// Adapter is a chat platform as the relay drives it. One Adapter serves every
// chat of its integration; its methods are called concurrently for different
// chats, never concurrently for the same chat.
//
// Send is the only call that is not idempotent: the relay calls it at most once
// per message it means to show, and stores the id it returns before it does
// anything else for that turn. Every later change to that message is an Edit or
// a Delete, which the adapter must make idempotent (an edit to the same content,
// "not modified", is success; a delete of a message already gone is success).
//
// Errors: a *RateLimitedError makes the relay wait RetryAfter for that chat and
// try the same call again; an error wrapping ErrPermanent (the bot was blocked,
// the chat is gone) makes it drop that one step and go on; any other error is
// retried with backoff, the chat's cursor unmoved.
type Adapter interface {
	// Limits are the platform's sizes and paces.
	Limits() Limits
	// Send shows a new message and returns its platform id.
	Send(ctx context.Context, chat record.Conversation, m Message) (id string, err error)
	// Edit replaces the content (text and buttons) of message id.
	Edit(ctx context.Context, chat record.Conversation, id string, m Message) error
	// Delete removes message id.
	Delete(ctx context.Context, chat record.Conversation, id string) error
	// Status shows an ephemeral indicator (typing, "thinking…", a tool line),
	// or clears it; it expires by itself on the platform after Limits.StatusTTL.
	Status(ctx context.Context, chat record.Conversation, s Status) error
}

// Limits are a platform's sizes and paces.
type Limits struct {
	// PartLimit is the longest message text, in UTF-16 code units (as Telegram
	// counts); a longer answer is shown in several messages. Default 4096.
	PartLimit int
	// StatusTTL is how long a Status stays visible on the platform (Telegram's
	// typing: 5 s); the relay refreshes it before then while a turn runs.
	// Default 5s.
	StatusTTL time.Duration
}

// Message is a message's content.
type Message struct {
	Text    string
	Buttons []Button
	// Growing marks the text of an answer still growing (its final text
	// has not come): an adapter that paces its calls may put it off, and
	// the relay's next try carries the newer text.
	Growing bool
}

// Button is an inline button; Data comes back to Relay.Press when pressed
// (at most 64 bytes: Telegram's callback_data limit).
type Button struct {
	Label string
	Data  string
}

// StatusKind is what a Status shows.
type StatusKind string

const (
	StatusTyping StatusKind = "typing" // the turn runs ("thinking…")
	StatusTool   StatusKind = "tool"   // a tool runs: Text is a short line
	StatusClear  StatusKind = "clear"  // the turn ended: take any indicator away
)

// Status is an ephemeral indicator.
type Status struct {
	Kind StatusKind
	Text string
}

// ErrPermanent marks an adapter error that retrying cannot cure.
var ErrPermanent = errors.New("relay: permanent platform error")

// RateLimitedError is the platform's 429: wait RetryAfter before the next call
// for this chat. Paced marks a call the adapter put off itself, to stay within
// the platform's limits: nothing reached the platform.
type RateLimitedError struct {
	RetryAfter time.Duration
	Paced      bool
}

func (e *RateLimitedError) Error() string {
	if e.Paced {
		return fmt.Sprintf("relay: put off to keep the platform's pace, retry after %v", e.RetryAfter)
	}
	return fmt.Sprintf("relay: rate limited, retry after %v", e.RetryAfter)
}
