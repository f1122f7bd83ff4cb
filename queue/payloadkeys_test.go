package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
)

// dupBase is a clean payload whose string fields the duplicate-key tests give twice.
const dupBase = `{"v":1,"agent_id":"a","text":"hi","sender_id":"s","conversation":{"integration":"web","chat_id":"c1"},"message_id":"m","otid":"4c6e3f2a-1b2c-4d5e-8f90-123456789abc","metadata":{"k":"v"}}`

// withDup returns dupBase with key (a top-level or conversation field) given
// again right after its first appearance, as again: value.
func withDup(t testing.TB, path, first, again, value string) string {
	name := path[strings.LastIndexByte(path, '.')+1:]
	i := strings.Index(dupBase, `"`+name+`":`)
	if i < 0 {
		t.Fatalf("no %s in the base payload", name)
	}
	// The end of the first value: a string (the base holds no escapes).
	j := i + len(name) + 3
	k := j + 1 + strings.IndexByte(dupBase[j+1:], '"') + 1
	return dupBase[:i] + `"` + first + `":` + dupBase[j:k] + `,"` + again + `":` + value + dupBase[k:]
}

// TestDecodePayloadRefusesDuplicateKeys: a key given twice in one object
// (the same, in another case, or spelled with escapes) is refused naming
// the key, whatever the values (an unpaired surrogate then null was the
// trick that got a rewritten id past the UTF-8 check), in a task payload
// and an HTTP body alike.
func TestDecodePayloadRefusesDuplicateKeys(t *testing.T) {
	fields := []string{"agent_id", "text", "sender_id", "message_id", "otid", "conversation.integration", "conversation.chat_id", "v"}
	for _, path := range fields {
		name := path[strings.LastIndexByte(path, '.')+1:]
		spellings := []string{name, strings.ToUpper(name), strings.Replace(name, name[:1], `\u00`+fmt.Sprintf("%x", name[0]), 1)}
		if path == "v" {
			spellings = []string{"v", "V", `\u0076`}
		}
		for _, again := range spellings {
			for _, value := range []string{`null`, `"\ud800"`, `"\ufffd"`, `"other"`, `7`} {
				body := withDup(t, path, name, again, value)
				if path == "v" {
					body = strings.Replace(dupBase, `"v":1`, `"v":1,"`+again+`":`+value, 1)
				}
				for _, whole := range []bool{true, false} {
					_, err := decodePayloadJSON([]byte(body), whole)
					ve, ok := IsValidationError(err)
					if !ok || ve.Field != path || !strings.Contains(ve.Problem, "more than once") {
						t.Errorf("%s (whole %v): got %v, want an error naming %s given more than once", body, whole, err, path)
					}
				}
			}
		}
	}
	// The payload: an unpaired surrogate, then null.
	body := `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c1"},"message_id":"\ud800","message_id":null}`
	if _, err := DecodePayload([]byte(body)); err == nil || !strings.Contains(err.Error(), "message_id") {
		t.Errorf("%s: %v, want refused naming message_id", body, err)
	}
	// Nested objects and arrays name the path; metadata keys are compared as
	// written (a map: "k" and "K" are two keys), the payload's own fields
	// without regard to case (as encoding/json matches them).
	for body, want := range map[string]string{
		`{"v":1,"metadata":{"k":"1","k":"2"}}`:                                                                "metadata.k",
		`{"v":1,"images":[{"url":"https://x/1"},{"url":"https://x/2","URL":null}]}`:                           "images[1].url",
		`{"v":1,"approval":{"decisions":[{"tool_call_id":"a","tool_call_id":"b"}]}}`:                          "approval.decisions[0].tool_call_id",
		`{"v":1,"conversation":{"chat_id":"x"},"Conversation":{"chat_id":"\ud800"}}`:                          "conversation",
		`{"v":1,"sender_id":"x","ſender_id":"y"}`:                                                             "sender_id", // encoding/json folds ſ to S
		`{"v":1,"text":"x","te\u0078t":"y"}`:                                                                  "text",
		`{"v":1,"x":[[{"a":1,"a":2}]]}`:                                                                       "x", // unknown: named before what it holds
		`{"v":1,"metadata":{"k":"1","K":"2"},"agent_id":"a","agent_id":"b"}`:                                  "agent_id",
		`{"v":1,"metadata":{"k":"1","K":"2"},"conversation":{"integration":"w","chat_id":"c","CHAT_ID":"d"}}`: "conversation.chat_id",
	} {
		_, err := decodePayloadJSON([]byte(body), true)
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != want {
			t.Errorf("%s: got %v, want an error naming %s", body, err, want)
		}
	}
	for _, body := range []string{
		`{"v":1,"metadata":{"k":"1","K":"2"}}`,
		`{"v":1,"images":[{"url":"https://x/1"},{"url":"https://x/2"}]}`,
		`{"v":1,"conversation":{"chat_id":"x"},"metadata":{"chat_id":"y"}}`,
		`{"v":1,"text":"\"text\":","sender_id":"\\","message_id":"\\\""}`,
	} {
		if _, err := decodePayloadJSON([]byte(body), true); err != nil {
			t.Errorf("%s: %v, want accepted", body, err)
		}
	}
}

// stdDecode decodes b as encoding/json does (one value, or the first).
func stdDecode(b []byte, whole bool) (Payload, error) {
	var p Payload
	if whole {
		return p, json.Unmarshal(b, &p)
	}
	return p, json.NewDecoder(bytes.NewReader(b)).Decode(&p)
}

// refDuplicate is a plain reference for duplicate keys: it walks the first
// JSON value of b with encoding/json's tokenizer and compares each
// object's keys pairwise, with strings.EqualFold (a superset of
// encoding/json's matching) except in the top-level metadata map, whose
// keys are compared as written.
func refDuplicate(b []byte) bool {
	d := json.NewDecoder(bytes.NewReader(b))
	var walk func(depth int, mapKeys bool) (bool, error)
	walk = func(depth int, mapKeys bool) (bool, error) {
		tok, err := d.Token()
		if err != nil {
			return false, err
		}
		switch tok {
		case json.Delim('{'):
			var keys []string
			for d.More() {
				kt, err := d.Token()
				if err != nil {
					return false, err
				}
				k := kt.(string)
				for _, seen := range keys {
					if seen == k || (!mapKeys && strings.EqualFold(seen, k)) {
						return true, nil
					}
				}
				keys = append(keys, k)
				if dup, err := walk(depth+1, depth == 0 && strings.EqualFold(k, "metadata")); dup || err != nil {
					return dup, err
				}
			}
			_, err = d.Token()
			return false, err
		case json.Delim('['):
			for d.More() {
				if dup, err := walk(depth+1, false); dup || err != nil {
					return dup, err
				}
			}
			_, err = d.Token()
			return false, err
		}
		return false, nil
	}
	dup, _ := walk(0, false)
	return dup
}

// rewritten reports whether a string the payload holds has a U+FFFD that
// is not written in b (as the character or as its escape): encoding/json
// made it from bytes or escapes that were not a character.
func rewritten(p Payload, b []byte) bool {
	if bytes.Contains(b, []byte("\uFFFD")) || bytes.Contains(bytes.ToLower(b), []byte(`\ufffd`)) {
		return false // a U+FFFD was written: no telling
	}
	for _, s := range []string{p.AgentID, p.Text, p.SenderID, p.Conversation.Integration, p.Conversation.ChatID, p.MessageID, p.Otid} {
		if strings.ContainsRune(s, utf8.RuneError) {
			return true
		}
	}
	return false
}

// checkAgainstStd is the differential property: decodePayloadJSON refuses
// whatever encoding/json refuses; what it accepts, it decodes as
// encoding/json does, with no key given twice and no string rewritten;
// what it refuses that encoding/json takes holds a duplicate key (and the
// error says so) or a rewritten string.
func checkAgainstStd(t testing.TB, b []byte, whole bool) {
	t.Helper()
	got, err := decodePayloadJSON(b, whole)
	want, stdErr := stdDecode(b, whole)
	first := b
	if !whole {
		// The first value, as the Decoder read it.
		d := json.NewDecoder(bytes.NewReader(b))
		var raw json.RawMessage
		if d.Decode(&raw) == nil {
			first = raw
		}
	}
	switch {
	case stdErr != nil:
		if err == nil {
			t.Fatalf("%q (whole %v): accepted, encoding/json says %v", b, whole, stdErr)
		}
	case err == nil:
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q (whole %v): decoded %+v, encoding/json %+v", b, whole, got, want)
		}
		if refDuplicate(first) {
			t.Fatalf("%q (whole %v): accepted with a key given twice", b, whole)
		}
		if rewritten(got, first) {
			t.Fatalf("%q (whole %v): accepted with a rewritten string: %+v", b, whole, got)
		}
	default:
		ve, ok := IsValidationError(err)
		if !ok {
			t.Fatalf("%q (whole %v): %v is not a *ValidationError", b, whole, err)
		}
		if strings.Contains(ve.Problem, "not a field") {
			// An unknown key: encoding/json refuses the value too when it
			// disallows unknown fields.
			d := json.NewDecoder(bytes.NewReader(first))
			d.DisallowUnknownFields()
			var p Payload
			if d.Decode(&p) == nil {
				t.Fatalf("%q (whole %v): refused with %v; encoding/json with DisallowUnknownFields accepts it", b, whole, err)
			}
			return
		}
		dup := refDuplicate(first)
		if dup != strings.Contains(ve.Problem, "more than once") {
			t.Fatalf("%q (whole %v): refused with %v; duplicate key per the reference: %v", b, whole, err, dup)
		}
		if !dup && !rewritten(want, first) && !payloadcheck.MayHoldRewrites(first) {
			t.Fatalf("%q (whole %v): refused with %v, but holds no duplicate key and no rewrite", b, whole, err)
		}
	}
}

// differentialInputs: duplicate keys (same, case, escaped, nested), nulls,
// escapes in keys and values, a BOM, and trailing data.
func differentialInputs() [][]byte {
	var out [][]byte
	add := func(s string) { out = append(out, []byte(s)) }
	for _, path := range []string{"agent_id", "text", "sender_id", "message_id", "otid", "conversation.integration", "conversation.chat_id"} {
		name := path[strings.LastIndexByte(path, '.')+1:]
		for _, again := range []string{name, strings.ToUpper(name), `\u00` + fmt.Sprintf("%x", name[0]) + name[1:]} {
			for _, value := range []string{`null`, `"\ud800"`, `"\ufffd"`, `"x"`, `7`, `{}`} {
				add(withDup(nil, path, name, again, value))
			}
		}
		for _, value := range []string{`null`, `"\ud800"`, `"\uD83D\uDE00"`, `"\u00e9\n\"\\"`, "\"\xff\"", `"\ufffd"`} {
			i := strings.Index(dupBase, `"`+name+`":`) + len(name) + 3
			k := i + 1 + strings.IndexByte(dupBase[i+1:], '"') + 1
			add(dupBase[:i] + value + dupBase[k:])
		}
	}
	add(`{"v":1,"metadata":{"k":"1","K":"2"}}`)
	add(`{"v":1,"metadata":{"k":"1","k":null}}`)
	add(`{"v":1,"images":[{"url":"https://x/1","url":null}]}`)
	add(`{"v":1,"conversation":null,"conversation":{"chat_id":"\ud800"}}`)
	add(`{"v":1,"ſender_id":"\ud800","sender_id":null}`)
	add(`{"v":1,"K":1,"\u212a":2}`)
	add(`{"v":1,"text":"\"text\":\"\\\"","a":"\\"}`)
	add(`null`)
	add(`[]`)
	add(`{}`)
	add(`"x"`)
	var more [][]byte
	for _, b := range append(out, []byte(dupBase)) {
		more = append(more, append([]byte("\xef\xbb\xbf"), b...))
		for _, tail := range []string{" ", "\n{}", "x", `{"message_id":"\ud800"}`, "}", "\x00"} {
			more = append(more, append(append([]byte(nil), b...), tail...))
		}
	}
	return append(out, more...)
}

// TestDecodePayloadMatchesEncodingJSON pins the decoder against encoding/json.
func TestDecodePayloadMatchesEncodingJSON(t *testing.T) {
	for _, b := range differentialInputs() {
		for _, whole := range []bool{true, false} {
			checkAgainstStd(t, b, whole)
		}
	}
	// The BOM and trailing data are refused in an HTTP body, as encoding/json refuses them.
	for _, b := range []string{"\xef\xbb\xbf" + dupBase, dupBase + " {}", dupBase + "x"} {
		if _, err := decodePayloadJSON([]byte(b), true); err == nil {
			t.Errorf("%q: accepted as one value", b)
		}
	}
}

// FuzzDecodePayloadMatchesStd: the differential property on any input.
func FuzzDecodePayloadMatchesStd(f *testing.F) {
	for _, b := range differentialInputs() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, whole := range []bool{true, false} {
			checkAgainstStd(t, b, whole)
		}
	})
}
