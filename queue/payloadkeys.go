package queue

import (
	"reflect"

	"github.com/lettaq/lettaq/queue/internal/codec"
)

// payloadFields are the keys a task payload may hold (codec.FindKeyFault
// refuses a key given twice, or one that is no field).
var payloadFields = codec.FieldsOf(reflect.TypeFor[Payload]())
