package queue

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"unicode/utf16"
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
	h, _, _ := enqueueHandler(t, "httpsize", Ordering{Off: true})
	post := func(body []byte) (int, string) {
		code, _, text := postEnqueue(h, "application/json", body)
		return code, text
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

// TestImageMIMEWrappedBase64: base64 wrapped in lines (as MIME, and Python's
// base64.encodebytes, write it) decodes the same; an image of exactly MaxImageBytes so
// written is accepted (its line breaks are not data), one byte more is refused, and Letta is
// sent the data without the line breaks.
func TestImageMIMEWrappedBase64(t *testing.T) {
	raw := bytes.Repeat([]byte{0x89, 'P', 'N', 'G'}, MaxImageBytes/4)
	m := validMessage()
	m.Images = []Image{{MediaType: "image/png", Data: mimeBase64(raw)}, {MediaType: "image/png", Data: mimeBase64(raw)}}
	if err := m.Validate(); err != nil {
		t.Errorf("two images of exactly %d bytes, MIME-wrapped: %v", MaxImageBytes, err)
	}
	sent := lettaImages(m.Images)
	if got, err := base64.StdEncoding.Strict().DecodeString(sent[0].Data); err != nil || !bytes.Equal(got, raw) || strings.ContainsAny(sent[0].Data, "\r\n") {
		t.Errorf("the data sent to Letta: %d bytes, %v, line breaks %v", len(got), err, strings.ContainsAny(sent[0].Data, "\r\n"))
	}
	if n := payloadBytes(m.Payload()); n > 2*len(base64.StdEncoding.EncodeToString(raw))+100 {
		t.Errorf("payloadBytes counts %d for two images of %d base64 characters: the line breaks count", n, len(base64.StdEncoding.EncodeToString(raw)))
	}
	m.Images = []Image{{MediaType: "image/png", Data: mimeBase64(append(raw, 0))}}
	if ve, ok := IsValidationError(m.Validate()); !ok || ve.Field != "images[0].data" || !strings.Contains(ve.Problem, "more than the limit") {
		t.Errorf("an image of %d bytes, MIME-wrapped: %v, want refused as over the limit", MaxImageBytes+1, m.Validate())
	}
}
