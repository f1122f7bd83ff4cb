package inbound

import (
	"errors"
	"fmt"

	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
)

// ValidationError reports a message or payload that cannot become a turn.
// Field is the payload's JSON field ("text", "conversation.chat_id", …, or
// "" for the payload as a whole).
type ValidationError struct {
	Field   string
	Problem string
}

func (e *ValidationError) Error() string {
	if e.Field == "" {
		return "lettaq: invalid payload: " + e.Problem
	}
	return "lettaq: invalid " + e.Field + ": " + e.Problem
}

// Invalid is a *ValidationError of field.
func Invalid(field, format string, args ...any) error {
	return &ValidationError{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// FromFault turns a *payloadcheck.Fault into a *ValidationError
// (nil stays nil).
func FromFault(err error) error {
	var f *payloadcheck.Fault
	if errors.As(err, &f) {
		return &ValidationError{Field: f.Field, Problem: f.Problem}
	}
	return err
}
