// Package payloadcheck holds the checks on a payload as its producer wrote
// it (the JSON, before encoding/json rewrites or drops what is wrong) and on
// its ids: shared by package queue (a task's payload) and queue/httpapi (a
// POSTed body), each turning a *Fault into its own error.
//
// encoding/json quietly rewrites invalid UTF-8 (and unpaired surrogate
// escapes such as "\ud800") to U+FFFD, so a chat id of invalid bytes would
// name another chat's reply stream; its type errors need their field named;
// and it takes the last of a key given twice (codec.FindKeyFault). Decode
// refuses all three.
package payloadcheck

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/record"
)

// Fault names the field of a payload at fault and what is wrong with it
// (queue.ValidationError's two fields).
type Fault struct {
	Field   string
	Problem string
}

func (f *Fault) Error() string { return f.Field + ": " + f.Problem }

// Invalid returns a *Fault.
func Invalid(field, format string, args ...any) error {
	return &Fault{Field: field, Problem: fmt.Sprintf(format, args...)}
}

// Decode parses b as a payload P (fields: its keys, codec.FieldsOf(P);
// conversation: P's Conversation field). whole: b must be one JSON value
// (the HTTP body); otherwise the first value is read (task payloads). On
// error the P holds what could be read, without a Conversation whose
// strings were rewritten, and the error is a *Fault naming the field.
func Decode[P any](b []byte, whole bool, fields codec.Fields, conversation func(*P) *record.Conversation) (P, error) {
	decode := func(v any) error {
		if whole {
			return json.Unmarshal(b, v)
		}
		return json.NewDecoder(bytes.NewReader(b)).Decode(v)
	}
	if d := codec.FindKeyFault(b, fields); d != nil {
		p := salvageConversation(decode, conversation)
		if top, _, _ := strings.Cut(d.Path, "."); !d.Unknown && string(codec.FoldKey([]byte(top))) == "conversation" {
			*conversation(&p) = record.Conversation{}
		}
		return p, KeyFault(d)
	}
	var p P
	var err error
	if !whole && json.Unmarshal(b, &p) == nil {
		// A task payload is one value (EncodePayload's): Unmarshal reads
		// it without a Decoder and its buffer. Anything else (bytes after
		// the value, an error) takes the Decoder's way: it reads the first
		// value and ignores what follows.
		whole = true // for decode below: b is one value
	} else {
		var zero P
		p = zero
		err = decode(&p)
	}
	if err != nil {
		return salvageConversation(decode, conversation), JSONError(err)
	}
	if !MayHoldRewrites(b) {
		return p, nil // nothing for the second decode to find
	}
	var raw rawPayloadStrings
	_ = decode(&raw) // cannot fail where decoding p did not
	if field := raw.fault(); field != "" {
		if raw.conversationFault() != "" {
			*conversation(&p) = record.Conversation{}
		}
		return p, Invalid(field, "is not valid UTF-8 (or holds an unpaired surrogate escape)")
	}
	return p, nil
}

// salvageConversation returns a P with only the conversation of a payload
// that does not decode (for the error event), or none when its strings
// were rewritten.
func salvageConversation[P any](decode func(any) error, conversation func(*P) *record.Conversation) P {
	var loose struct {
		Conversation record.Conversation `json:"conversation"`
	}
	_ = decode(&loose)
	var p P
	*conversation(&p) = loose.Conversation
	var raw rawPayloadStrings
	_ = decode(&raw)
	if raw.conversationFault() != "" {
		*conversation(&p) = record.Conversation{}
	}
	return p
}

// MayHoldRewrites reports whether b may hold a string that encoding/json
// decodes with replacement: b is not valid UTF-8, or holds a \u escape of
// a surrogate (\uD800-\uDFFF, any case). When it is false,
// rawPayloadStrings.fault finds nothing in any value b holds (the decoder
// took its escapes: each is \u and 4 hex digits, or a one-character one).
func MayHoldRewrites(b []byte) bool {
	if !utf8.Valid(b) {
		return true
	}
	for i := 0; i < len(b); i += 2 { // past the backslash and the character it escapes
		k := bytes.IndexByte(b[i:], '\\')
		if k < 0 {
			return false
		}
		i += k
		if i+3 < len(b) && b[i+1] == 'u' && b[i+2]|0x20 == 'd' {
			if c := b[i+3] | 0x20; c == '8' || c == '9' || ('a' <= c && c <= 'f') {
				return true
			}
		}
	}
	return false
}

// rawPayloadStrings holds the payload's strings as written.
type rawPayloadStrings struct {
	AgentID      json.RawMessage `json:"agent_id"`
	Text         json.RawMessage `json:"text"`
	SenderID     json.RawMessage `json:"sender_id"`
	Conversation struct {
		Integration json.RawMessage `json:"integration"`
		ChatID      json.RawMessage `json:"chat_id"`
	} `json:"conversation"`
	MessageID json.RawMessage `json:"message_id"`
	Otid      json.RawMessage `json:"otid"`
}

// fault returns the first field whose string is not valid UTF-8, or "".
func (r *rawPayloadStrings) fault() string {
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"agent_id", r.AgentID}, {"text", r.Text}, {"sender_id", r.SenderID}} {
		if !ValidString(f.raw) {
			return f.name
		}
	}
	if f := r.conversationFault(); f != "" {
		return f
	}
	if !ValidString(r.MessageID) {
		return "message_id"
	}
	if !ValidString(r.Otid) {
		return "otid"
	}
	return ""
}

func (r *rawPayloadStrings) conversationFault() string {
	switch {
	case !ValidString(r.Conversation.Integration):
		return "conversation.integration"
	case !ValidString(r.Conversation.ChatID):
		return "conversation.chat_id"
	}
	return ""
}

// ValidString reports whether raw, a JSON value, is not a string that
// decodes with replacement: its bytes are valid UTF-8 and every \u escape
// of a surrogate is one of a pair. Non-strings pass (their type is checked
// by the decoder).
func ValidString(raw json.RawMessage) bool {
	if len(raw) == 0 || raw[0] != '"' {
		return true
	}
	if !utf8.Valid(raw) {
		return false
	}
	hex4 := func(i int) (rune, bool) {
		if i+6 > len(raw) || raw[i] != '\\' || raw[i+1] != 'u' {
			return 0, false
		}
		n, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		return rune(n), err == nil
	}
	for i := 1; i < len(raw)-1; i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // a one-character escape
			continue
		}
		r, ok := hex4(i)
		if !ok {
			return false
		}
		switch {
		case r >= 0xD800 && r < 0xDC00: // high surrogate: a low one must follow
			lo, ok := hex4(i + 6)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return false
			}
			i += 11
		case r >= 0xDC00 && r <= 0xDFFF:
			return false
		default:
			i += 5
		}
	}
	return true
}

// JSONError turns a decoding error into a *Fault naming the field.
func JSONError(err error) error {
	var te *json.UnmarshalTypeError
	var pe *time.ParseError
	switch {
	case errors.As(err, &te):
		want := jsonKind(te.Type)
		if te.Field == "" {
			return Invalid("", "the payload must be %s, not a JSON %s", want, te.Value)
		}
		return Invalid(te.Field, "must be %s, not a JSON %s", want, te.Value)
	case errors.As(err, &pe):
		return Invalid("enqueued_at", "is not an RFC 3339 time: %q", pe.Value)
	}
	return Invalid("", "not a JSON object of the payload format: %v", err)
}

func jsonKind(t reflect.Type) string {
	if t == nil {
		return "another type"
	}
	switch t.Kind() {
	case reflect.String:
		return "a JSON string"
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint, reflect.Uint64, reflect.Uint32, reflect.Float64:
		return "a JSON number"
	case reflect.Bool:
		return "true or false"
	case reflect.Struct, reflect.Map:
		return "a JSON object"
	case reflect.Slice, reflect.Array:
		return "a JSON array"
	}
	return "a JSON " + strings.ToLower(t.Kind().String())
}

// KeyFault is the *Fault naming d's key: a key given twice, or (d.Unknown)
// one that is no field. encoding/json takes the last of a key given twice
// in one object, matches the payload's fields without regard to case (and
// to escapes), and leaves a field unchanged for a null: so
// {"message_id":"\ud800","message_id":null} decodes to U+FFFD while the raw
// copy the UTF-8 check reads is the null. A payload names each key once.
func KeyFault(d *codec.KeyFault) error {
	if d.Unknown {
		return Invalid(d.Path, "is not a field of the payload (unknown fields are refused: a misspelled field would be dropped)")
	}
	if d.First == d.Again {
		return Invalid(d.Path, "is given more than once (a payload names each key once)")
	}
	return Invalid(d.Path, "is given more than once, as %s and %s (keys match without regard to case; a payload names each key once)",
		strconv.Quote(d.First), strconv.Quote(d.Again))
}
