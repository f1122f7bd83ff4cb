package httpapi

import (
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue"
)

// A message with base64 images up to the limits fits the enqueue
// endpoint's body.
func TestEnqueueHandlerTakesImages(t *testing.T) {
	h, _, _ := enqueueHandler(t, "img", queue.Ordering{})
	data := base64.StdEncoding.EncodeToString(make([]byte, queue.MaxImageBytes))
	body := `{"agent_id": "agent-1", "text": "` + strings.Repeat("a", queue.MaxTextBytes) + `", "conversation": {"integration": "web", "chat_id": "img"},
		"images": [{"media_type": "image/png", "data": "` + data + `"}, {"media_type": "image/png", "data": "` + data + `"}]}`
	req := httptest.NewRequest(http.MethodPost, "/enqueue", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != 202 {
		t.Fatalf("%d %s", rec.Code, rec.Body.String())
	}
}
