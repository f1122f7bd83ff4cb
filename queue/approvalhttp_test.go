package queue_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/httpapi"
)

// The enqueue endpoint takes an answer as {"answer": …}: 202 with the
// answer's task, 400 naming a missing call, 404 for an unknown request.
func TestEnqueueHandlerAnswers(t *testing.T) {
	c, _, p, _ := queue.ApprovalClient(t)
	h := httpapi.EnqueueHandler(c)
	post := func(body string) (int, string) {
		req := httptest.NewRequest(http.MethodPost, "/enqueue", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if code, body := post(`{"answer": {"request": "` + p.RequestTaskID + `", "decisions": [{"tool_call_id": "call-1", "approve": true}]}}`); code != 400 ||
		!strings.Contains(body, "call-2") || !strings.Contains(body, `"field":"approval.decisions"`) {
		t.Errorf("partial: %d %s", code, body)
	}
	if code, body := post(`{"answer": {"request": "turn:nope", "approve": true}}`); code != 404 || !strings.Contains(body, `"field":"answer.request"`) {
		t.Errorf("unknown: %d %s", code, body)
	}
	if code, body := post(`{"answer": {"request": "", "approve": true}}`); code != 400 {
		t.Errorf("empty request: %d %s", code, body)
	}
	code, body := post(`{"answer": {"request": "` + p.Otid + `", "approve": false, "reason": "no"}, "message_id": "cb-1"}`)
	if code != 202 || !strings.Contains(body, `"task_id":"`+queue.AnswerTaskID(p.RequestTaskID)+`"`) || !strings.Contains(body, `"duplicate":false`) {
		t.Errorf("answer: %d %s", code, body)
	}
	if code, body := post(`{"answer": {"request": "` + p.RequestTaskID + `", "approve": true}}`); code != 202 || !strings.Contains(body, `"duplicate":true`) {
		t.Errorf("pressed twice: %d %s", code, body)
	}
}
