package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/lettaq/lettaq/queue"
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

// TestEnqueueHandlerLimitIsOnDecodedSize: the message, 64 KiB of CJK text and two
// 1 MiB images, is accepted whether the producer writes the text as UTF-8 or as \u escapes
// (Python's default): the limit is on the payload decoded, with a byte cap before decoding
// that no escaping of a valid payload reaches. A body past the cap, and a payload over the
// limit once decoded, are 413.
func TestEnqueueHandlerLimitIsOnDecodedSize(t *testing.T) {
	h, _, _ := enqueueHandler(t, "httpsize", queue.Ordering{Off: true})
	post := func(body []byte) (int, string) {
		code, _, text := postEnqueue(h, "application/json", body)
		return code, text
	}
	img := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{0x89}, queue.MaxImageBytes))
	text := strings.Repeat("漢", queue.MaxTextBytes/3) // 65535 bytes
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
	// Over the limit once decoded (a text of MaxBodyBytes+1), and past the cap before it.
	if code, out := post([]byte(`{"text":"` + strings.Repeat("a", MaxBodyBytes+1) + `"}`)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a payload over the limit once decoded: %d %.200s, want 413", code, out)
	}
	if code, out := post([]byte(`{"x":"` + strings.Repeat("a", maxRawBodyBytes) + `"}`)); code != http.StatusRequestEntityTooLarge {
		t.Errorf("a body past the cap: %d %.200s, want 413", code, out)
	}
}

// TestPayloadBytesSkipsLineBreaks: base64 wrapped in lines (as MIME, and
// Python's base64.encodebytes, write it) counts its data, not its line
// breaks, against MaxBodyBytes.
func TestPayloadBytesSkipsLineBreaks(t *testing.T) {
	raw := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, queue.MaxImageBytes/4)
	p := queue.Payload{Images: []queue.Image{{MediaType: "image/png", Data: mimeBase64(raw)}, {MediaType: "image/png", Data: mimeBase64(raw)}}}
	if n := payloadBytes(p); n > 2*len(base64.StdEncoding.EncodeToString(raw))+100 {
		t.Errorf("payloadBytes counts %d for two images of %d base64 characters: the line breaks count", n, len(base64.StdEncoding.EncodeToString(raw)))
	}
}

// mimeBase64 is b in base64 wrapped as MIME writes it: lines of 76 characters ending CRLF.
func mimeBase64(b []byte) string {
	s := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	for len(s) > 76 {
		out.WriteString(s[:76] + "\r\n")
		s = s[76:]
	}
	out.WriteString(s + "\r\n")
	return out.String()
}

type failingBody struct{}

// TestEnqueueHandlerBodyErrors: a body over the limit is 413; one that cannot be read
// (the listener's body timeout) is 400, not "too large".
func TestEnqueueHandlerBodyErrors(t *testing.T) {
	h := EnqueueHandler(nil) // neither reaches the client
	for _, tc := range []struct {
		body io.Reader
		want int
	}{
		{strings.NewReader(`{"text":"` + strings.Repeat("a", MaxBodyBytes+1) + `"}`), http.StatusRequestEntityTooLarge}, // over the limit once decoded
		{failingBody{}, http.StatusBadRequest},
	} {
		rr := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/enqueue", tc.body)
		req.Header.Set("Content-Type", "application/json")
		h.ServeHTTP(rr, req)
		if rr.Code != tc.want {
			t.Errorf("%T: %d %s, want %d", tc.body, rr.Code, rr.Body.String(), tc.want)
		}
	}
}

// TestEnqueueHandlerRefusesNonJSONAndNamesFields: text/plain (which a
// browser sends across sites without asking) is 415 naming the expected
// type; type and UTF-8 errors are 400 naming their field.
func TestEnqueueHandlerRefusesNonJSONAndNamesFields(t *testing.T) {
	h, _, _ := enqueueHandler(t, "http415", queue.Ordering{Off: true})
	post := func(ctype, body string) (int, map[string]any) {
		code, out, _ := postEnqueue(h, ctype, []byte(body))
		return code, out
	}
	good := `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"c1"}}`
	for _, ct := range []string{"text/plain", "text/plain; charset=utf-8", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""} {
		code, out := post(ct, good)
		if code != http.StatusUnsupportedMediaType || !strings.Contains(out["error"].(string), "application/json") {
			t.Errorf("Content-Type %q: %d %v, want 415 naming application/json", ct, code, out)
		}
	}
	if code, out := post("application/json; charset=utf-8", good); code != http.StatusAccepted {
		t.Errorf("application/json: %d %v", code, out)
	}
	if code, out := post("application/json", `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":7}}`); code != http.StatusBadRequest || out["field"] != "conversation.chat_id" {
		t.Errorf("chat_id a number: %d %v", code, out)
	}
	if code, out := post("application/json", `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"\ud800"}}`); code != http.StatusBadRequest || out["field"] != "conversation.chat_id" {
		t.Errorf("chat_id an unpaired surrogate: %d %v", code, out)
	}
	if code, out := post("application/json", "{\"agent_id\":\"a\",\"text\":\"hi\",\"conversation\":{\"integration\":\"web\",\"chat_id\":\"\xff\"}}"); code != http.StatusBadRequest || out["field"] != "conversation.chat_id" {
		t.Errorf("chat_id invalid UTF-8: %d %v", code, out)
	}
	if code, out := post("application/json", `{"agent_id":"a","text":"hi","conversation":{"integration":"web","chat_id":"\u001b]0;x\u0007"}}`); code != http.StatusBadRequest || out["field"] != "conversation.chat_id" {
		t.Errorf("chat_id with ESC: %d %v", code, out)
	}
}

func (failingBody) Read([]byte) (int, error) { return 0, errors.New("i/o timeout") }
