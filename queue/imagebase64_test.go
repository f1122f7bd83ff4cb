package queue

import (
	"bytes"
	"encoding/base64"
	"strings"
	"testing"
)

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
	m.Images = []Image{{MediaType: "image/png", Data: mimeBase64(append(raw, 0))}}
	if ve, ok := IsValidationError(m.Validate()); !ok || ve.Field != "images[0].data" || !strings.Contains(ve.Problem, "more than the limit") {
		t.Errorf("an image of %d bytes, MIME-wrapped: %v, want refused as over the limit", MaxImageBytes+1, m.Validate())
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
