package queue

import (
	"errors"
	"fmt"
	"strings"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/record"
)

// The errors a caller tests for with errors.Is (they come wrapped).
var (
	// ErrNotFound: the journal has no record of the turn, or it has
	// expired (Journal.Get, Client.Cancel).
	ErrNotFound = journal.ErrNotFound
	// ErrNoApproval: no approval request is known by the given task id or
	// otid (Client.AnswerApproval, Client.Approve, Client.Deny).
	ErrNoApproval = approval.ErrNoRequest
)

// The error types a caller tests for with errors.As follow.

// ValidationError reports a message or payload that cannot become a turn.
// Field is the payload's JSON field ("text", "conversation.chat_id", …, or
// "" for the payload as a whole), Problem what is wrong with it.
type ValidationError = inbound.ValidationError

// invalid is a *ValidationError of field.
func invalid(field, format string, args ...any) error { return inbound.Invalid(field, format, args...) }

// IsValidationError reports whether err is (or wraps) a *ValidationError,
// and returns it.
func IsValidationError(err error) (*ValidationError, bool) {
	var ve *ValidationError
	ok := errors.As(err, &ve)
	return ve, ok
}

// AmbiguousError is Lookup's error for a prefix that more than one turn's task id or otid
// starts with. Candidates holds up to MaxLookupCandidates of them, sorted; More reports that
// more turns begin with it (they were not read).
type AmbiguousError struct {
	Prefix     string
	Candidates []string
	More       bool
}

func (e *AmbiguousError) Error() string {
	n := fmt.Sprintf("%d", len(e.Candidates))
	list := strings.Join(e.Candidates, ", ")
	if e.More {
		n = "more than " + n
		list += " and more"
	}
	return fmt.Sprintf("%q is the beginning of %s turns' ids: %s; give more of the id", e.Prefix, n, list)
}

// MessageIDConflictError is Client.Enqueue's answer to a message whose MessageID was enqueued
// before with another content (text and images): a message id names one message, so that is a
// client bug (an idempotency key reused for other content, which payment APIs refuse too),
// not a duplicate delivery. Nothing is enqueued. httpapi.EnqueueHandler answers it 409.
type MessageIDConflictError struct {
	MessageID string
	// TaskID is the task of the message enqueued first.
	TaskID string
	// EnqueuedHash and NewHash are contentHash of the message enqueued first and of this one.
	EnqueuedHash, NewHash string
}

func (e *MessageIDConflictError) Error() string {
	return fmt.Sprintf("queue: message id %q was enqueued before with another text (task %s, content sha256 %s; this message: %s): give this message its own id, or send the same text again",
		e.MessageID, e.TaskID, e.EnqueuedHash, e.NewHash)
}

// NotifyKeyConflictError is Notify's answer to a key that an earlier
// notify of the same chat used for another text: a key names one message,
// so that is a caller's bug. Nothing is written. httpapi.NotifyHandler
// answers it 409.
type NotifyKeyConflictError struct {
	Chat record.Conversation
	Key  string
	// ID is the entry the key's first notify wrote.
	ID string
}

func (e *NotifyKeyConflictError) Error() string {
	return fmt.Sprintf("queue: notify key %q was used in chat %s for another text (entry %s): give this message its own key, or send the same text again",
		e.Key, e.Chat, e.ID)
}

// validationError turns a *payloadcheck.Fault into a *ValidationError
// (nil stays nil).
func validationError(err error) error { return inbound.FromFault(err) }
