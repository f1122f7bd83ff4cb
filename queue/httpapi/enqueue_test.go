package httpapi

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// enqueueHandler is EnqueueHandler over a Client on the real Redis with a queue of the
// test's own, named after name and removed when the test ends: the handler, the queue, and an
// inspector on it.
func enqueueHandler(t *testing.T, name string, ord queue.Ordering) (http.Handler, string, *asynq.Inspector) {
	t.Helper()
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-" + name + "-" + time.Now().Format("150405.000000")
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
	t.Cleanup(func() { _ = insp.DeleteQueue(q, true); _ = insp.Close(); _ = c.Close() })
	return EnqueueHandler(c), q, insp
}

// postEnqueue POSTs body to h with Content-Type ctype ("": none), and returns the status, the
// answer's JSON object (nil when it is none) and the answer as text.
func postEnqueue(h http.Handler, ctype string, body []byte) (int, map[string]any, string) {
	rr := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodPost, "/enqueue", bytes.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	h.ServeHTTP(rr, req)
	var out map[string]any
	_ = json.Unmarshal(rr.Body.Bytes(), &out)
	return rr.Code, out, rr.Body.String()
}

func TestEnqueueHandler(t *testing.T) {
	h, q, insp := enqueueHandler(t, "http", queue.Ordering{})
	post := func(body string) (int, map[string]any) {
		code, out, _ := postEnqueue(h, "application/json", []byte(body))
		return code, out
	}
	body := `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c1"},"message_id":"m1"}`
	code, out := post(body)
	if code != http.StatusAccepted || out["task_id"] != "turn:web:c1:m1" || out["duplicate"] != false {
		t.Fatalf("%d %v", code, out)
	}
	code, out = post(body)
	if code != http.StatusAccepted || out["duplicate"] != true {
		t.Fatalf("dup: %d %v", code, out)
	}
	code, out = post(`{"agent_id":"a","text":"","conversation":{"integration":"web","chat_id":"c1"}}`)
	if code != http.StatusBadRequest || out["field"] != "text" {
		t.Fatalf("invalid: %d %v", code, out)
	}
	// Asynq's MaxRetry is one more than the retries of failures: the last is kept for put-backs.
	info, err := insp.GetTaskInfo(q, "turn:web:c1:m1")
	if err != nil || info.Type != queue.TaskType || info.MaxRetry != queue.DefaultMaxRetry+1 || info.Timeout < time.Minute {
		t.Fatalf("task %+v %v", info, err)
	}
	rr := httptest.NewRecorder()
	h.ServeHTTP(rr, httptest.NewRequest(http.MethodGet, "/enqueue", nil))
	if rr.Code != http.StatusMethodNotAllowed {
		t.Fatalf("GET: %d", rr.Code)
	}
}

// TestEnqueueHandlerRefusesDuplicateKey: the two messages. The
// first (message_id an unpaired surrogate, then null) is 400 naming
// message_id; the second, a different message whose id is U+FFFD, is then
// enqueued as a new task, not taken for a duplicate of the first.
func TestEnqueueHandlerRefusesDuplicateKey(t *testing.T) {
	h, q, _ := enqueueHandler(t, "httpdup", queue.Ordering{Off: true})
	post := func(body string) (int, map[string]any) {
		code, out, _ := postEnqueue(h, "application/json", []byte(body))
		return code, out
	}
	chat := "c-" + q
	code, out := post(`{"agent_id":"a","text":"first","conversation":{"integration":"web","chat_id":"` + chat + `"},"message_id":"\ud800","message_id":null}`)
	if code != http.StatusBadRequest || out["field"] != "message_id" {
		t.Fatalf("the duplicate message_id: %d %v, want 400 naming message_id", code, out)
	}
	code, out = post(`{"agent_id":"a","text":"second","conversation":{"integration":"web","chat_id":"` + chat + `"},"message_id":"\ufffd"}`)
	if code != http.StatusAccepted || out["duplicate"] != false {
		t.Fatalf("the second message: %d %v, want 202, not a duplicate", code, out)
	}
	// The same trick on chat_id and on an approval answer's message_id.
	code, out = post(`{"agent_id":"a","text":"x","conversation":{"integration":"web","chat_id":"\ud800","chat_id":null}}`)
	if code != http.StatusBadRequest || out["field"] != "conversation.chat_id" {
		t.Errorf("the duplicate chat_id: %d %v", code, out)
	}
	code, out = post(`{"answer":{"request":"turn:x","approve":true},"message_id":"\ud800","message_id":null}`)
	if code != http.StatusBadRequest || out["field"] != "message_id" {
		t.Errorf("an answer's duplicate message_id: %d %v", code, out)
	}
	code, out = post(`{"answer":{"request":"turn:x","approve":true},"message_id":"\ud800"}`)
	if code != http.StatusBadRequest || out["field"] != "message_id" {
		t.Errorf("an answer's message_id an unpaired surrogate: %d %v", code, out)
	}
}

// A message id reused with another text is a 409 naming message_id, with
// ordering and without (Client.Enqueue's *queue.MessageIDConflictError).
func TestEnqueueHandlerMessageIDConflict(t *testing.T) {
	for _, ord := range []queue.Ordering{{}, {Off: true}} {
		h, q, _ := enqueueHandler(t, "idconflict", ord)
		p := queue.Payload{AgentID: "agent-1", Text: "first", Conversation: record.Conversation{Integration: "web", ChatID: "c-" + q}, MessageID: "m1"}
		body, _ := json.Marshal(p)
		if code, _, raw := postEnqueue(h, "application/json", body); code != http.StatusAccepted {
			t.Fatalf("ordered=%v: the first message: %d %s", !ord.Off, code, raw)
		}
		p.Text = "other"
		body, _ = json.Marshal(p)
		if code, out, raw := postEnqueue(h, "application/json", body); code != http.StatusConflict || out["field"] != "message_id" {
			t.Errorf("ordered=%v: POST /enqueue of the message id with another text: %d %s; want 409 naming message_id", !ord.Off, code, raw)
		}
	}
}

// TestUnknownFieldsRefusedHTTP: a key of the enqueue endpoint's body that
// no field matches, in a payload or in an answer, is a 400 naming it.
func TestUnknownFieldsRefusedHTTP(t *testing.T) {
	h, _, _ := enqueueHandler(t, "unknown", queue.Ordering{})
	for _, c := range []struct{ body, field string }{
		{`{"agent_id": "agent-1", "text": "hi", "conversation": {"integration": "web", "chat_id": "unknown-field"}, "sender": "ann"}`, "sender"},
		{`{"answer": {"request": "turn:x", "approve": true, "because": "why not"}}`, "answer.because"},
	} {
		req := httptest.NewRequest(http.MethodPost, "/enqueue", strings.NewReader(c.body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusBadRequest || !strings.Contains(rec.Body.String(), `"field":"`+c.field+`"`) {
			t.Errorf("POST %s: %d %s, want 400 naming %s", c.body, rec.Code, rec.Body.String(), c.field)
		}
	}
}
