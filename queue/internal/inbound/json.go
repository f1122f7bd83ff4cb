package inbound

import (
	"reflect"

	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// Reading a payload from JSON: payloadcheck.Decode refuses what
// encoding/json would rewrite or drop (invalid UTF-8, a key given twice)
// and names the field of a type error.

// DecodeJSON parses b as a Payload. whole: b must be one JSON value
// (the HTTP body); otherwise the first value is read (a task's payload:
// what follows it is ignored). On error the Payload holds what could be read, without a
// Conversation whose strings were rewritten, and the error is a
// *ValidationError naming the field.
func DecodeJSON(b []byte, whole bool) (Payload, error) {
	p, err := payloadcheck.Decode(b, whole, payloadFields, func(p *Payload) *record.Conversation { return &p.Conversation })
	return p, FromFault(err)
}

// Decode parses and validates a task payload. On error the returned
// Message holds whatever could be read (a worker uses its Conversation to
// report the error), and the error is a *ValidationError.
func Decode(b []byte) (Message, error) {
	p, err := DecodeJSON(b, false)
	m := p.Message()
	if err != nil {
		return m, err
	}
	if p.V != PayloadVersion {
		return m, Invalid("v", "unknown payload version %d (this worker reads version %d)", p.V, PayloadVersion)
	}
	return m, m.Validate()
}

// payloadFields are the keys a task payload may hold (codec.FindKeyFault
// refuses a key given twice, or one that is no field).
var payloadFields = codec.FieldsOf(reflect.TypeFor[Payload]())
