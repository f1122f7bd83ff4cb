package queue

import (
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
)

// Reading a payload from JSON: payloadcheck.Decode refuses what
// encoding/json would rewrite or drop (invalid UTF-8, a key given twice)
// and names the field of a type error.

// decodePayloadJSON parses b as a Payload. whole: b must be one JSON value
// (the HTTP body); otherwise the first value is read (a task's payload:
// what follows it is ignored). On error the Payload holds what could be read, without a
// Conversation whose strings were rewritten, and the error is a
// *ValidationError naming the field.
func decodePayloadJSON(b []byte, whole bool) (Payload, error) {
	p, err := payloadcheck.Decode(b, whole, payloadFields, func(p *Payload) *Conversation { return &p.Conversation })
	return p, validationError(err)
}

// DecodePayload parses and validates a task payload. On error the returned
// Message holds whatever could be read (a worker uses its Conversation to
// report the error), and the error is a *ValidationError.
func DecodePayload(b []byte) (Message, error) {
	p, err := decodePayloadJSON(b, false)
	m := p.Message()
	if err != nil {
		return m, err
	}
	if p.V != PayloadVersion {
		return m, invalid("v", "unknown payload version %d (this worker reads version %d)", p.V, PayloadVersion)
	}
	return m, m.Validate()
}
