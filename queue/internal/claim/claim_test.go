package claim

import (
	"encoding/json"
	"testing"
)

// A takeover task's payload round-trips, and a payload without the turn's task id or its
// original payload is refused, saying so.
func TestDecodePayload(t *testing.T) {
	b, err := json.Marshal(Payload{TaskID: "turn:a", Queue: "q", From: "w/1", Retried: 2, MaxRetry: 5, Payload: []byte(`{"v":1}`)})
	if err != nil {
		t.Fatal(err)
	}
	p, err := DecodePayload(b)
	if err != nil || p.TaskID != "turn:a" || p.From != "w/1" || p.Retried != 2 || string(p.Payload) != `{"v":1}` {
		t.Fatalf("decoded %+v, %v", p, err)
	}
	for _, bad := range []string{`{"task_id":"turn:a"}`, `{"payload":"e30="}`, `not json`} {
		if _, err := DecodePayload([]byte(bad)); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
	if got := TaskID("w/1", "turn:a"); got != "takeover:w/1:turn:a" {
		t.Errorf("TaskID = %q", got)
	}
}
