// Package codec holds the pieces of lettaq's hand-written JSON codecs: the
// encoders' (the journal record, the task result, the reply event's data),
// each writing what encoding/json writes for the same value (HTML-safe
// string escaping, invalid UTF-8 as \ufffd, RFC 3339 times, omitempty)
// without its reflection (~10% of an instant turn's CPU when it was used);
// and the payload decoder's key checks (FindKeyFault: keys given twice, or
// matching no field; a top-level "metadata" object is a map of any keys).
package codec

import (
	"strconv"
	"time"
	"unicode/utf8"
)

// CloseObject closes the object opened at b[open] ('{'), dropping the
// comma after the brace that the first field appended (fields append
// `,"name":value`).
func CloseObject(b []byte, open int) []byte {
	if len(b) > open+1 {
		copy(b[open+1:], b[open+2:])
		b = b[:len(b)-1]
	}
	return append(b, '}')
}

// AppendStringField appends key (`,"name":`) and s, unless s is empty
// (omitempty).
func AppendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return AppendString(append(b, key...), s)
}

// AppendIntField appends key and n, unless n is 0 (omitempty).
func AppendIntField(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}

// AppendStringsField appends key and ss, unless ss is empty (omitempty).
func AppendStringsField(b []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return b
	}
	b = append(b, key...)
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = AppendString(b, s)
	}
	return append(b, ']')
}

// AppendTimeField appends key and t, unless t is zero (omitzero).
func AppendTimeField(b []byte, key string, t time.Time, ok *bool) []byte {
	if t.IsZero() {
		return b
	}
	return AppendTime(append(b, key...), t, ok)
}

// AppendTime appends t as time.Time.MarshalJSON does; *ok becomes false
// where MarshalJSON fails.
func AppendTime(b []byte, t time.Time, ok *bool) []byte {
	b = append(b, '"')
	n0 := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	// MarshalJSON's checks (time.Time.appendStrictRFC3339).
	switch {
	case b[n0+len("9999")] != '-': // year not exactly 4 digits wide
		*ok = false
	case b[len(b)-1] != 'Z':
		c := b[len(b)-len("Z07:00")]
		h := 10*(b[len(b)-5]-'0') + (b[len(b)-4] - '0')
		if ('0' <= c && c <= '9') || h >= 24 {
			*ok = false
		}
	}
	return append(b, '"')
}

// jsonSafe marks the bytes below utf8.RuneSelf that encoding/json writes
// as they are (with HTML escaping, as json.Marshal does).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		switch c {
		case '"', '\\', '<', '>', '&':
		default:
			t[c] = true
		}
	}
	return t
}()

const jsonHex = "0123456789abcdef"

// AppendString appends s as a JSON string, as json.Marshal does
// (encoding/json's appendString with escapeHTML).
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
