package queue

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// TestDecodePayloadRejectsEachStringField: an unpaired surrogate escape
// (either case, high or low) or invalid UTF-8 in any of the payload's
// string fields is refused naming that field, in a task payload and in an
// HTTP body; the same payload written cleanly is accepted.
func TestDecodePayloadRejectsEachStringField(t *testing.T) {
	fields := []struct{ name, key string }{
		{"agent_id", `"agent_id":"X"`},
		{"text", `"text":"X"`},
		{"sender_id", `"sender_id":"X"`},
		{"conversation.integration", `"integration":"X"`},
		{"conversation.chat_id", `"chat_id":"X"`},
		{"message_id", `"message_id":"X"`},
		{"otid", `"otid":"X"`},
	}
	const clean = `{"v":1,"agent_id":"a","text":"hi","sender_id":"s","conversation":{"integration":"web","chat_id":"c"},"message_id":"m","otid":"4c6e3f2a-1b2c-4d5e-8f90-123456789abc"}`
	if _, err := DecodePayload([]byte(clean)); err != nil {
		t.Fatalf("the clean payload: %v", err)
	}
	for _, f := range fields {
		for _, bad := range []string{`\ud800`, `\uD800`, `\uDBFFz`, `\udc00`, `\uDFFF`, `a\ud800\u0041`, "\xff", "a\xc3", "\xed\xa0\x80", `\\\ud800`} {
			// The field's value becomes bad, the others stay clean.
			i := strings.Index(clean, strings.SplitN(f.key, "X", 2)[0])
			j := i + len(strings.SplitN(f.key, "X", 2)[0])
			k := j + strings.IndexByte(clean[j:], '"')
			body := clean[:j] + bad + clean[k:]
			for _, whole := range []bool{false, true} {
				p, err := decodePayloadJSON([]byte(body), whole)
				ve, ok := IsValidationError(err)
				if !ok || ve.Field != f.name {
					t.Errorf("%q (whole %v): got %v, want an error naming %s", body, whole, err, f.name)
					continue
				}
				if strings.HasPrefix(f.name, "conversation.") && p.Conversation != (record.Conversation{}) {
					t.Errorf("%q: the rewritten conversation %q is returned", body, p.Conversation)
				}
			}
		}
		// A pair, an escaped backslash before "ud800", and other escapes are no fault.
		for _, good := range []string{`\ud83d\ude00`, `\uD83D\uDE00`, `a\\ud800`, `\u00e9\n\"`, `\ufffd`, "\uFFFD"} {
			i := strings.Index(clean, strings.SplitN(f.key, "X", 2)[0])
			j := i + len(strings.SplitN(f.key, "X", 2)[0])
			k := j + strings.IndexByte(clean[j:], '"')
			body := clean[:j] + good + clean[k:]
			if _, err := decodePayloadJSON([]byte(body), true); err != nil {
				t.Errorf("%q: %v", body, err)
			}
		}
	}
}

// BenchmarkDecodePayload: a plain turn's payload, decoded with the second
// decode always (old) and only when mayHoldRewrites (new), in one run.
func BenchmarkDecodePayload(b *testing.B) {
	m := validMessage()
	m.MessageID, m.SenderID, m.Text = "msg-42", "user-7", "Hello there, how is the weather today?"
	payload, err := EncodePayload(m)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("always twice", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodePayload(payload); err != nil {
				b.Fatal(err)
			}
			var raw struct { // the decode the skip saves (payloadcheck's raw strings)
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
			if err := json.NewDecoder(bytes.NewReader(payload)).Decode(&raw); err != nil {
				b.Fatal(err)
			}
			for _, s := range []json.RawMessage{raw.AgentID, raw.Text, raw.SenderID, raw.Conversation.Integration, raw.Conversation.ChatID, raw.MessageID, raw.Otid} {
				if !payloadcheck.ValidString(s) {
					b.Fatal(string(s))
				}
			}
		}
	})
	b.Run("skip", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := DecodePayload(payload); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// A task payload is its first JSON value: what follows it is ignored, and a value that does
// not decode is refused the same way, whether bytes follow it or not (one value is read by
// Unmarshal, anything else by a Decoder).
func TestDecodePayloadFirstValue(t *testing.T) {
	m := validMessage()
	m.Text = "hello"
	payload, err := EncodePayload(m)
	if err != nil {
		t.Fatal(err)
	}
	want, err := DecodePayload(payload)
	if err != nil {
		t.Fatal(err)
	}
	for _, tail := range []string{" ", "\n{\"text\":\"other\"}", "garbage", `{"v":`} {
		got, err := DecodePayload(append(append([]byte(nil), payload...), tail...))
		if err != nil || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("payload + %q: %+v, %v; want %+v", tail, got, err, want)
		}
	}
	bad := bytes.Replace(payload, []byte(`"text":"hello"`), []byte(`"text":7`), 1)
	_, err1 := DecodePayload(bad)
	_, err2 := DecodePayload(append(bad, " {}"...))
	ve, ok := IsValidationError(err1)
	if !ok || ve.Field != "text" || fmt.Sprint(err1) != fmt.Sprint(err2) {
		t.Errorf("a text of 7: %v; with bytes after it: %v", err1, err2)
	}
}
