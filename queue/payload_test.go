package queue

import (
	"encoding/json"
	"github.com/lettaq/lettaq/queue/record"
	"strings"
	"testing"
	"time"
)

func validMessage() Message {
	return Message{AgentID: "agent-1", Text: "hi", Conversation: record.Conversation{Integration: "telegram", ChatID: "42"}}
}

func TestMessageValidate(t *testing.T) {
	for _, tc := range []struct {
		name, field string
		mod         func(*Message)
	}{
		{"ok", "", func(*Message) {}},
		{"no agent", "agent_id", func(m *Message) { m.AgentID = "" }},
		{"empty text", "text", func(m *Message) { m.Text = "" }},
		{"big text", "text", func(m *Message) { m.Text = strings.Repeat("a", MaxTextBytes+1) }},
		{"max text", "", func(m *Message) { m.Text = strings.Repeat("a", MaxTextBytes) }},
		{"bad utf8", "text", func(m *Message) { m.Text = "a\xc3" }},
		{"no integration", "conversation.integration", func(m *Message) { m.Conversation.Integration = "" }},
		{"colon", "conversation.integration", func(m *Message) { m.Conversation.Integration = "a:b" }},
		{"no chat", "conversation.chat_id", func(m *Message) { m.Conversation.ChatID = "" }},
		{"chat newline", "conversation.chat_id", func(m *Message) { m.Conversation.ChatID = "a\nb" }},
		{"long message id", "message_id", func(m *Message) { m.MessageID = strings.Repeat("x", MaxIDBytes+1) }},
		{"bad otid", "otid", func(m *Message) { m.Otid = "123" }},
		{"good otid", "", func(m *Message) { m.Otid = "4c6e3f2a-1b2c-4d5e-8f90-123456789abc" }},
		{"metadata value", "metadata.k", func(m *Message) { m.Metadata = map[string]string{"k": strings.Repeat("v", MaxMetadataValueBytes+1)} }},
		{"metadata key", "metadata", func(m *Message) { m.Metadata = map[string]string{strings.Repeat("k", 65): "v"} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := validMessage()
			tc.mod(&m)
			err := m.Validate()
			if tc.field == "" {
				if err != nil {
					t.Fatalf("unexpected %v", err)
				}
				return
			}
			ve, ok := IsValidationError(err)
			if !ok || ve.Field != tc.field || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want field %s", err, tc.field)
			}
		})
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	m := validMessage()
	m.MessageID, m.SenderID, m.Metadata = "m1", "u1", map[string]string{"k": "v"}
	m.EnqueuedAt = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
	b, err := EncodePayload(m)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	_ = json.Unmarshal(b, &raw)
	if raw["v"] != float64(1) || raw["agent_id"] != "agent-1" || raw["message_id"] != "m1" {
		t.Fatalf("payload %s", b)
	}
	got, err := DecodePayload(b)
	if err != nil || got.Text != m.Text || got.Conversation != m.Conversation || !got.EnqueuedAt.Equal(m.EnqueuedAt) || got.Metadata["k"] != "v" {
		t.Fatalf("decoded %+v %v", got, err)
	}
	for _, tc := range []struct{ payload, field string }{
		{`{`, ""},
		{`{"v":2,"agent_id":"a","text":"t","conversation":{"integration":"x","chat_id":"1"}}`, "v"},
		{`{"v":1,"text":"t","conversation":{"integration":"x","chat_id":"1"}}`, "agent_id"},
	} {
		m, err := DecodePayload([]byte(tc.payload))
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != tc.field {
			t.Errorf("%s: %v", tc.payload, err)
		}
		if tc.field != "" && m.Conversation.ChatID != "1" {
			t.Errorf("%s: conversation not salvaged: %+v", tc.payload, m)
		}
	}
}

func TestTaskIDAndOtid(t *testing.T) {
	m := validMessage()
	if a, b := TaskIDFor(m), TaskIDFor(m); a == b || !strings.HasPrefix(a, "turn:") {
		t.Fatalf("without message id: %q %q", a, b)
	}
	m.MessageID = "99"
	if id := TaskIDFor(m); id != "turn:telegram:42:99" {
		t.Fatalf("id %q", id)
	}
	m.MessageID = strings.Repeat("x", 300)
	id := TaskIDFor(m)
	if len(id) > 100 || id != TaskIDFor(m) || !strings.HasPrefix(id, "turn:h:") {
		t.Fatalf("long id %q", id)
	}
	o1, o2 := OtidFor(m, "turn:a"), OtidFor(m, "turn:a")
	if o1 != o2 || o1 == OtidFor(m, "turn:b") {
		t.Fatalf("otids %s %s", o1, o2)
	}
	m.Otid = "4c6e3f2a-1b2c-4d5e-8f90-123456789abc"
	if OtidFor(m, "turn:a") != m.Otid {
		t.Fatal("own otid not kept")
	}
}

// TestTextWithNULRefused: a NUL in the text (or an approval reason) is refused naming the
// field and the byte: Letta stores messages in PostgreSQL, whose text cannot hold U+0000,
// so the send would fail at the server (or the character be lost) after the turn began.
func TestTextWithNULRefused(t *testing.T) {
	m := validMessage()
	m.Text = "hello\x00world"
	ve, ok := IsValidationError(m.Validate())
	if !ok || ve.Field != "text" || !strings.Contains(ve.Problem, "NUL") || !strings.Contains(ve.Problem, "byte 5") {
		t.Errorf("text with a NUL: %v, want refused naming NUL at byte 5", m.Validate())
	}
	if _, err := DecodePayload([]byte(`{"v":1,"agent_id":"a","text":"a\u0000b","conversation":{"integration":"web","chat_id":"c"}}`)); err == nil {
		t.Error(`a task payload with "\u0000" in its text: accepted`)
	}
	m = validMessage()
	m.Text = ""
	m.Approval = &record.Answer{RequestTaskID: "turn:x", Decisions: []record.ApprovalVerdict{{ToolCallID: "call-1", Reason: "no\x00"}}}
	if ve, ok := IsValidationError(m.Validate()); !ok || !strings.HasSuffix(ve.Field, ".reason") {
		t.Errorf("a reason with a NUL: %v, want refused naming the reason", m.Validate())
	}
}
