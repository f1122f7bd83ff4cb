package queue

import (
	"errors"

	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
)

// Reading a payload from JSON: payloadcheck.Decode refuses what
// encoding/json would rewrite or drop (invalid UTF-8, a key given twice)
// and names the field of a type error.

// decodePayloadJSON parses b as a Payload. whole: b must be one JSON value
// (the HTTP body); otherwise the first value is read (task payloads, as
// before). On error the Payload holds what could be read, without a
// Conversation whose strings were rewritten, and the error is a
// *ValidationError naming the field.
func decodePayloadJSON(b []byte, whole bool) (Payload, error) {
	p, err := payloadcheck.Decode(b, whole, payloadFields, func(p *Payload) *Conversation { return &p.Conversation })
	return p, validationError(err)
}

// validationError turns a *payloadcheck.Fault into a *ValidationError
// (nil stays nil).
func validationError(err error) error {
	var f *payloadcheck.Fault
	if errors.As(err, &f) {
		return &ValidationError{Field: f.Field, Problem: f.Problem}
	}
	return err
}
