package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/record"
)

// idStrings returns every string of up to n runes over alphabet.
func idStrings(alphabet string, n int) []string {
	out := []string{""}
	last := []string{""}
	for range n {
		var next []string
		for _, s := range last {
			for _, r := range alphabet {
				next = append(next, s+string(r))
			}
		}
		out = append(out, next...)
		last = next
	}
	return out
}

// TestTaskIDInjective: every (integration, chat, message) triple over an
// alphabet of separators, escapes and their encodings gets its own task id,
// every (agent, integration, chat) its own ordering key, and every
// (integration, chat) its own reply stream. The old rule
// gave chat "1:2" + message "3" and chat "1" + message "2:3" one id.
func TestTaskIDInjective(t *testing.T) {
	parts := idStrings(":%3A1", 3) // "1:2"-style runs, "%3A" spelled out, "%" alone
	parts = append(parts, strings.Repeat("x", 150), strings.Repeat("x", 150)+":", strings.Repeat("x", 149)+"%3A")
	integrations := []string{"web", "w%3A", "w%"} // integrations cannot hold ':' (Validate)
	ids := make(map[string][3]string)
	keys := make(map[string][3]string)
	streams := make(map[string]record.Conversation)
	replies := NewReplies(nil, RepliesOptions{Prefix: "p:"})
	for _, in := range integrations {
		for _, chat := range parts {
			if chat == "" {
				continue
			}
			for _, msg := range parts {
				if msg == "" {
					continue
				}
				m := Message{AgentID: "a", Text: "t", Conversation: record.Conversation{Integration: in, ChatID: chat}, MessageID: msg}
				if chat == msg { // every part is valid; check each once
					if err := m.Validate(); err != nil {
						t.Fatalf("%q %q %q: %v", in, chat, msg, err)
					}
				}
				triple := [3]string{in, chat, msg}
				id := TaskIDFor(m)
				if prev, ok := ids[id]; ok {
					t.Fatalf("task id %q for both %q and %q", id, prev, triple)
				}
				ids[id] = triple
			}
			conv := record.Conversation{Integration: in, ChatID: chat}
			if prev, ok := streams[replies.Key(conv)]; ok {
				t.Fatalf("reply stream %q for both %q and %q", replies.Key(conv), prev, conv)
			}
			streams[replies.Key(conv)] = conv
			for _, agent := range []string{"a", "a:web", "a%3A"} {
				k := Ordering{}.Key(Message{AgentID: agent, Conversation: record.Conversation{Integration: in, ChatID: chat}})
				triple := [3]string{agent, in, chat}
				if prev, ok := keys[k]; ok && prev != triple {
					t.Fatalf("ordering key %q for both %q and %q", k, prev, triple)
				}
				keys[k] = triple
			}
		}
	}
	t.Logf("%d distinct task ids, %d distinct ordering keys", len(ids), len(keys))
}

// FuzzTaskIDInjective: two valid messages with different parts never share
// a task id (go test -fuzz=FuzzTaskIDInjective ./queue/ to search further).
func FuzzTaskIDInjective(f *testing.F) {
	f.Add("web", "1:2", "3", "web", "1", "2:3")
	f.Add("web", "1%3A2", "3", "web", "1:2", "3")
	f.Add("w", "a:b", "c", "w:a", "b", "c")
	f.Add("web", strings.Repeat("x", 200), "1", "web", strings.Repeat("x", 199), "x:1")
	f.Fuzz(func(t *testing.T, i1, c1, m1, i2, c2, m2 string) {
		a := Message{AgentID: "a", Text: "t", Conversation: record.Conversation{Integration: i1, ChatID: c1}, MessageID: m1}
		b := Message{AgentID: "a", Text: "t", Conversation: record.Conversation{Integration: i2, ChatID: c2}, MessageID: m2}
		if a.Validate() != nil || b.Validate() != nil || a.MessageID == "" || b.MessageID == "" {
			return
		}
		if [3]string{i1, c1, m1} != [3]string{i2, c2, m2} && TaskIDFor(a) == TaskIDFor(b) {
			t.Fatalf("%q and %q share task id %q", [3]string{i1, c1, m1}, [3]string{i2, c2, m2}, TaskIDFor(a))
		}
		if (i1 != i2 || c1 != c2) && (Ordering{}).Key(a) == (Ordering{}).Key(b) {
			t.Fatalf("conversations %q/%q and %q/%q share ordering key", i1, c1, i2, c2)
		}
	})
}

// TestTaskIDReadable: ids without '%' or ':' are what they always were (so
// their otids too); the others are escaped, not hashed.
func TestTaskIDReadable(t *testing.T) {
	for _, tc := range []struct{ in, chat, msg, want string }{
		{"telegram", "42", "99", "turn:telegram:42:99"},
		{"slack", "C024BE91L", "1700000000.000100", "turn:slack:C024BE91L:1700000000.000100"},
		{"web", "1:2", "3", "turn:web:1%3A2:3"},
		{"web", "1", "2:3", "turn:web:1:2%3A3"},
		{"web", "50%", "a", "turn:web:50%25:a"},
	} {
		m := Message{AgentID: "a", Text: "t", Conversation: record.Conversation{Integration: tc.in, ChatID: tc.chat}, MessageID: tc.msg}
		if got := TaskIDFor(m); got != tc.want {
			t.Errorf("TaskIDFor(%s, %s, %s) = %q, want %q", tc.in, tc.chat, tc.msg, got, tc.want)
		}
	}
	// The otid of an unchanged id is unchanged: the namespace and the id.
	m := Message{AgentID: "a", Text: "t", Conversation: record.Conversation{Integration: "telegram", ChatID: "42"}, MessageID: "99"}
	if got, want := OtidFor(m, TaskIDFor(m)), uuid.NewSHA1(otidNamespace, []byte("turn:telegram:42:99")).String(); got != want {
		t.Errorf("otid %s, want %s", got, want)
	}
}

// TestEnqueueCollidingPartsTwoTasks: the two messages that shared a task id
// under the old rule are two tasks, each in its own conversation's line.
func TestEnqueueCollidingPartsTwoTasks(t *testing.T) {
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-ids-" + time.Now().Format("150405.000000")
	prefix := "lettaq-unit:" + q + ":"
	rdb := srv.Client(t)
	ord := Ordering{Config: ordering.Config{Prefix: prefix + "ord:"}}
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
	defer func() {
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		ctx := context.Background()
		keys, _ := rdb.Keys(ctx, prefix+"*").Result()
		if len(keys) > 0 {
			_ = rdb.Del(ctx, keys...).Err()
		}
	}()
	a := Message{AgentID: "agent", Text: "from chat A", Conversation: record.Conversation{Integration: "web", ChatID: "1:2"}, MessageID: "3"}
	b := Message{AgentID: "agent", Text: "from chat B", Conversation: record.Conversation{Integration: "web", ChatID: "1"}, MessageID: "2:3"}
	ra, err := c.Enqueue(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	rb, err := c.Enqueue(context.Background(), b)
	if err != nil {
		t.Fatal(err)
	}
	if ra.Duplicate || rb.Duplicate || ra.TaskID == rb.TaskID || ra.Otid == rb.Otid {
		t.Fatalf("two chats, one task: %+v %+v", ra, rb)
	}
	// Each is first in its own line: B did not join behind A.
	if ra.Position != 0 || rb.Position != 0 {
		t.Fatalf("positions %d and %d, want 0 and 0 (separate lines)", ra.Position, rb.Position)
	}
	for _, tc := range []struct {
		res  EnqueueResult
		want Message
	}{{ra, a}, {rb, b}} {
		info, err := insp.GetTaskInfo(q, tc.res.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		got, err := DecodePayload(info.Payload)
		if err != nil || got.Text != tc.want.Text || got.Conversation != tc.want.Conversation {
			t.Fatalf("task %s holds %+v (%v), want the message of chat %q", tc.res.TaskID, got, err, tc.want.Conversation.ChatID)
		}
	}
}

// TestIDsRejectControlCharacters: an id holding ESC (terminal sequences),
// another C0 or C1 character or DEL is refused, naming the field.
func TestIDsRejectControlCharacters(t *testing.T) {
	fields := map[string]func(*Message, string){
		"agent_id":                 func(m *Message, v string) { m.AgentID = v },
		"sender_id":                func(m *Message, v string) { m.SenderID = v },
		"conversation.integration": func(m *Message, v string) { m.Conversation.Integration = v },
		"conversation.chat_id":     func(m *Message, v string) { m.Conversation.ChatID = v },
		"message_id":               func(m *Message, v string) { m.MessageID = v },
		"otid":                     func(m *Message, v string) { m.Otid = v },
	}
	for field, set := range fields {
		for _, bad := range []string{"\x1b]0;owned\x07", "a\x1b[2Jb", "x\x7f", "x\u0085", "\u009b31m", "a\tb", "a\x00"} {
			m := validMessage()
			set(&m, bad)
			ve, ok := IsValidationError(m.Validate())
			if !ok || ve.Field != field {
				t.Errorf("%s = %q: got %v, want an error naming %s", field, bad, m.Validate(), field)
				continue
			}
			if strings.ContainsAny(ve.Error(), "\x1b\x07\x7f\u0085\u009b\t\x00") {
				t.Errorf("%s: the error repeats the control character raw: %q", field, ve.Error())
			}
		}
	}
	// Printable non-ASCII stays accepted.
	m := validMessage()
	m.Conversation.ChatID, m.SenderID = "чат-😀", "José"
	if err := m.Validate(); err != nil {
		t.Fatal(err)
	}
}

// TestDecodePayloadRejectsInvalidUTF8: a payload whose id is invalid UTF-8
// (or an unpaired surrogate escape) is refused naming the field; its chat
// is not rewritten to U+FFFD (which would name another chat's stream).
func TestDecodePayloadRejectsInvalidUTF8(t *testing.T) {
	const tmpl = `{"v":1,"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"CHAT"},"message_id":"MSG","sender_id":"SENDER"}`
	for _, tc := range []struct{ chat, msg, sender, field string }{
		{"\xff", "m", "s", "conversation.chat_id"},
		{`\ud800`, "m", "s", "conversation.chat_id"},
		{`\udc00x`, "m", "s", "conversation.chat_id"},
		{`\ud800\u0041`, "m", "s", "conversation.chat_id"},
		{"c", "\xc3", "s", "message_id"},
		{"c", "m", `\udfff`, "sender_id"},
		{"c\xe2\x82", "m", "s", "conversation.chat_id"},
		{`\ud83d\ude00`, "m", "s", ""}, // a pair: 😀
		{`\ufffd`, "m", "s", ""},       // U+FFFD written as such is a real character
		{"\uFFFD", `a\\ud800`, "s", ""},
	} {
		b := strings.NewReplacer("CHAT", tc.chat, "MSG", tc.msg, "SENDER", tc.sender).Replace(tmpl)
		m, err := DecodePayload([]byte(b))
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v", b, err)
			}
			continue
		}
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != tc.field {
			t.Errorf("%q: got %v, want an error naming %s", b, err, tc.field)
			continue
		}
		if strings.HasPrefix(tc.field, "conversation.") && m.Conversation != (record.Conversation{}) {
			t.Errorf("%q: the rewritten conversation %q is returned for the error event", b, m.Conversation)
		}
	}
}

// TestDecodePayloadNamesTypeErrors: a field of the wrong JSON type is named.
func TestDecodePayloadNamesTypeErrors(t *testing.T) {
	for body, field := range map[string]string{
		`{"v":1,"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":5}}`:                             "conversation.chat_id",
		`{"v":"1","agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c"}}`:                         "v",
		`{"v":1,"agent_id":["a"],"text":"hi","conversation":{"integration":"web","chat_id":"c"}}`:                         "agent_id",
		`{"v":1,"agent_id":"a","text":"hi","conversation":"web"}`:                                                         "conversation",
		`{"v":1,"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c"},"enqueued_at":"yesterday"}`: "enqueued_at",
	} {
		_, err := DecodePayload([]byte(body))
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != field || !strings.Contains(ve.Error(), field) {
			t.Errorf("%s: got %v, want field %s", body, err, field)
		}
	}
}
