package queue

import (
	"reflect"
	"strconv"

	"github.com/lettaq/lettaq/queue/internal/codec"
)

// Duplicate keys in a payload. encoding/json takes the last of a key given
// twice in one object, matches the payload's fields without regard to case
// (and to escapes), and leaves a field unchanged for a null: so
// {"message_id":"\ud800","message_id":null} decodes to U+FFFD while the raw
// copy the UTF-8 check reads is the null. A payload names each key once;
// codec.FindKeyFault finds the first that is given twice.

// keyFaultError is the *ValidationError naming d's key.
func keyFaultError(d *codec.KeyFault) error {
	if d.Unknown {
		return invalid(d.Path, "is not a field of the payload (unknown fields are refused: a misspelled field would be dropped)")
	}
	if d.First == d.Again {
		return invalid(d.Path, "is given more than once (a payload names each key once)")
	}
	return invalid(d.Path, "is given more than once, as %s and %s (keys match without regard to case; a payload names each key once)",
		strconv.Quote(d.First), strconv.Quote(d.Again))
}

// The keys a task payload and an approval answer's body may hold.
var (
	payloadFields = codec.FieldsOf(reflect.TypeFor[Payload]())
	answerFields  = codec.FieldsOf(reflect.TypeFor[AnswerPayload]())
)
