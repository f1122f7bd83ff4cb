package queue

import (
	"strings"
	"testing"
)

// TestUnknownFieldsRefused: a payload key that no field matches (a typo
// such as "converstion" or "image" would be dropped in silence, the turn
// run without it) is refused with a *ValidationError naming it, in a task
// payload (the enqueue endpoint's body: queue/httpapi's
// TestUnknownFieldsRefusedHTTP), at any depth; the
// metadata map takes any key, and keys match fields without regard to case
// as encoding/json matches them.
func TestUnknownFieldsRefused(t *testing.T) {
	const conv = `"conversation": {"integration": "web", "chat_id": "1"}`
	for _, c := range []struct{ body, field string }{
		{`{"v": 1, "agent_id": "a", "text": "hi", ` + conv + `, "colour": "red"}`, "colour"},
		{`{"v": 1, "agent_id": "a", "text": "hi", "conversation": {"integration": "web", "chat_id": "1", "thread": "x"}}`, "conversation.thread"},
		{`{"v": 1, "agent_id": "a", "text": "hi", ` + conv + `, "images": [{"url": "https://x.test/a.png"}, {"uri": "https://x.test/b.png"}]}`, "images[1].uri"},
		{`{"v": 1, "agent_id": "a", ` + conv + `, "approval": {"request_task_id": "turn:x", "decisions": [{"tool_call_id": "c", "approved": true}]}}`, "approval.decisions[0].approved"},
		{`{"v": 1, "agent_id": "a", "message": "hi", ` + conv + `}`, "message"},
	} {
		_, err := DecodePayload([]byte(c.body))
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != c.field || !strings.Contains(ve.Problem, "not a field") {
			t.Errorf("DecodePayload(%s): %v, want a ValidationError naming %s", c.body, err, c.field)
		}
	}
	for _, body := range []string{
		`{"v": 1, "agent_id": "a", "text": "hi", ` + conv + `, "metadata": {"anything": "goes", "colour": "red"}}`,
		`{"V": 1, "Agent_ID": "a", "TEXT": "hi", ` + conv + `}`,
	} {
		if _, err := DecodePayload([]byte(body)); err != nil {
			t.Errorf("DecodePayload(%s): %v", body, err)
		}
	}
}
