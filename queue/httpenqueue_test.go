package queue

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
)

// enqueueHandler is EnqueueHTTPHandler over a Client on the real Redis with a queue of the
// test's own, named after name and removed when the test ends: the handler, the queue, and an
// inspector on it.
func enqueueHandler(t *testing.T, name string, ord Ordering) (http.Handler, string, *asynq.Inspector) {
	t.Helper()
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-" + name + "-" + time.Now().Format("150405.000000")
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
	t.Cleanup(func() { _ = insp.DeleteQueue(q, true); _ = insp.Close(); _ = c.Close() })
	return EnqueueHTTPHandler(c), q, insp
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
