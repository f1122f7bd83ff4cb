package queue

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
)

// asciiJSON re-encodes a JSON document as Python's json.dumps does by default
// (ensure_ascii): every character outside ASCII as \uXXXX (a surrogate pair above U+FFFF).
func asciiJSON(b []byte) []byte {
	var out bytes.Buffer
	for _, r := range string(b) {
		if r < 0x80 {
			out.WriteRune(r)
			continue
		}
		for _, u := range utf16.Encode([]rune{r}) {
			fmt.Fprintf(&out, `\u%04x`, u)
		}
	}
	return out.Bytes()
}

// TestEnqueueHTTPHandlerLimitIsOnDecodedSize: the message, 64 KiB of CJK text and two
// 1 MiB images, is accepted whether the producer writes the text as UTF-8 or as \u escapes
// (Python's default): the limit is on the payload decoded, with a byte cap before decoding
// that no escaping of a valid payload reaches. A body past the cap, and a payload over the
// limit once decoded, are 413.
func TestEnqueueHTTPHandlerLimitIsOnDecodedSize(t *testing.T) {
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-httpsize-" + time.Now().Format("150405.000000")
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
	defer func() { _ = insp.DeleteQueue(q, true); _ = insp.Close() }()
	h := EnqueueHTTPHandler(c)
	post := func(body []byte) (int, string) {
		rr := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/enqueue", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rr, req)
		return rr.Code, rr.Body.String()
	}
	img := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, MaxImageBytes))
	text := strings.Repeat("漢", MaxTextBytes/3) // 65535 bytes
	for i, escape := range []bool{false, true} {
		m := map[string]any{"agent_id": "a", "text": text, "conversation": map[string]string{"integration": "web", "chat_id": "c"},
			"message_id": fmt.Sprint("m", i), "images": []map[string]string{{"media_type": "image/png", "data": img}, {"media_type": "image/png", "data": img}}}
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		body := buf.Bytes()
		if escape {
			body = asciiJSON(body)
		}
		if code, out := post(body); code != http.StatusAccepted {
			t.Errorf("escaped %v, %d bytes: %d %.200s, want 202", escape, len(body), code, out)
		}
	}
	// Over the limit once decoded (a text of MaxHTTPBodyBytes+1), and past the cap before it.
	if code, out := post([]byte(`{"text":"` + strings.Repeat("a", MaxHTTPBodyBytes+1) + `"}`)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a payload over the limit once decoded: %d %.200s, want 413", code, out)
	}
	if code, out := post([]byte(`{"x":"` + strings.Repeat("a", maxHTTPRawBodyBytes) + `"}`)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body past the cap: %d %.200s, want 413", code, out)
	}
}
