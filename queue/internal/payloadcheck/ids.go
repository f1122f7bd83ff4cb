package payloadcheck

import (
	"strings"
	"unicode/utf8"
)

// MaxIDBytes bounds agent_id, sender_id, message_id and the two parts of
// the conversation (queue.MaxIDBytes).
const MaxIDBytes = 512

// CheckID checks one id of a payload: required ones not empty, at most
// MaxIDBytes of valid UTF-8 without control characters.
func CheckID(field, v string, required bool) error {
	switch {
	case v == "" && required:
		return Invalid(field, "must not be empty")
	case len(v) > MaxIDBytes:
		return Invalid(field, "is %d bytes, more than %d", len(v), MaxIDBytes)
	case !utf8.ValidString(v):
		return Invalid(field, "is not valid UTF-8")
	}
	for i, r := range v {
		if IsControl(r) {
			return Invalid(field, "holds the control character %U at byte %d (ids must not contain C0, C1 or DEL characters, such as ESC, tab or line breaks)", r, i)
		}
	}
	return nil
}

// IsControl reports whether r is a C0 or C1 control character or DEL.
func IsControl(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) }

// Base64Len is the length of base64 data without the line breaks that the
// decoder skips (MIME and Python's base64.encodebytes wrap lines at 76
// characters).
func Base64Len(data string) int {
	return len(data) - strings.Count(data, "\n") - strings.Count(data, "\r")
}
