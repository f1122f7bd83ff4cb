package lettasim

import (
	"encoding/binary"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
)

// This file holds the hand-written JSON encoder. Letta writes message objects with their fields
// in a fixed order and nulls written out; encoding/json on maps would sort the keys and struct
// encoding would need one struct per message type, so the sim appends bytes itself. It is also
// cheap: one buffer per chunk, no reflection.

// newUUID returns a random (version 4) UUID string. It uses math/rand/v2 instead of crypto/rand:
// ids only need to be unique, and SeedHistory mints hundreds of thousands of them.
func newUUID() string { return newID("") }

// newID returns "<prefix>-<uuid4>", the shape of every Letta id (message-, run-, ping-, agent-,
// step-); an empty prefix gives the bare UUID. One allocation.
func newID(prefix string) string {
	var u uuid.UUID
	binary.LittleEndian.PutUint64(u[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(u[8:], rand.Uint64())
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	var sb strings.Builder
	n := 36
	if prefix != "" {
		n += len(prefix) + 1
	}
	sb.Grow(n)
	if prefix != "" {
		sb.WriteString(prefix)
		sb.WriteByte('-')
	}
	for i, c := range u {
		if i == 4 || i == 6 || i == 8 || i == 10 {
			sb.WriteByte('-')
		}
		sb.WriteByte(hexDigits[c>>4])
		sb.WriteByte(hexDigits[c&0xf])
	}
	return sb.String()
}

// dateLayout is ISO-8601 with microseconds and a numeric offset, as Python's isoformat() writes
// an aware UTC datetime ("2025-01-02T03:04:05.123456+00:00").
const dateLayout = "2006-01-02T15:04:05.000000-07:00"

// appendDate appends t, in UTC, as a JSON string in dateLayout. It writes the digits itself:
// AppendFormat parses the layout on every call, and the streams write a date per frame (tests
// check it against time.Format).
func appendDate(b []byte, t time.Time) []byte {
	t = t.UTC()
	year, month, day := t.Date()
	if year < 0 || year > 9999 {
		b = append(b, '"')
		b = t.AppendFormat(b, dateLayout) // a sign or a fifth digit: time's own rules
		return append(b, '"')
	}
	hour, minute, sec := t.Clock()
	us := t.Nanosecond() / 1000
	b = append(b, '"',
		byte('0'+year/1000), byte('0'+year/100%10), byte('0'+year/10%10), byte('0'+year%10), '-',
		byte('0'+int(month)/10), byte('0'+int(month)%10), '-',
		byte('0'+day/10), byte('0'+day%10), 'T',
		byte('0'+hour/10), byte('0'+hour%10), ':',
		byte('0'+minute/10), byte('0'+minute%10), ':',
		byte('0'+sec/10), byte('0'+sec%10), '.',
		byte('0'+us/100000), byte('0'+us/10000%10), byte('0'+us/1000%10),
		byte('0'+us/100%10), byte('0'+us/10%10), byte('0'+us%10))
	return append(b, "+00:00\""...)
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string (escaping like encoding/json, minus the HTML escapes;
// invalid UTF-8 becomes U+FFFD).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
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
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// jsonObj appends the members of one JSON object, in call order. Start it with begin and finish
// it with end; nested values are appended to buf directly after key.
type jsonObj struct {
	buf []byte
	n   int
}

func beginObj(b []byte) jsonObj { return jsonObj{buf: append(b, '{')} }

func (o *jsonObj) end() []byte { return append(o.buf, '}') }

func (o *jsonObj) key(k string) {
	if o.n > 0 {
		o.buf = append(o.buf, ',')
	}
	o.n++
	o.buf = appendString(o.buf, k)
	o.buf = append(o.buf, ':')
}

func (o *jsonObj) str(k, v string) {
	o.key(k)
	o.buf = appendString(o.buf, v)
}

// strOrNull writes null for the empty string.
func (o *jsonObj) strOrNull(k, v string) {
	if v == "" {
		o.null(k)
		return
	}
	o.str(k, v)
}

func (o *jsonObj) null(k string) {
	o.key(k)
	o.buf = append(o.buf, "null"...)
}

func (o *jsonObj) int(k string, v int64) {
	o.key(k)
	o.buf = strconv.AppendInt(o.buf, v, 10)
}

// intOrNull writes null for a negative value.
func (o *jsonObj) intOrNull(k string, v int64) {
	if v < 0 {
		o.null(k)
		return
	}
	o.int(k, v)
}

func (o *jsonObj) boolean(k string, v bool) {
	o.key(k)
	o.buf = strconv.AppendBool(o.buf, v)
}

func (o *jsonObj) date(k string, t time.Time) {
	o.key(k)
	o.buf = appendDate(o.buf, t)
}

// dateOrNull writes null for the zero time.
func (o *jsonObj) dateOrNull(k string, t time.Time) {
	if t.IsZero() {
		o.null(k)
		return
	}
	o.date(k, t)
}

func (o *jsonObj) raw(k, v string) {
	o.key(k)
	o.buf = append(o.buf, v...)
}

// appendDetail is the common error body {"detail": "..."}.
func appendDetail(b []byte, msg string) []byte {
	o := beginObj(b)
	o.str("detail", msg)
	return o.end()
}

// appendValidation is a FastAPI-style 422 body (HTTPValidationError).
func appendValidation(b []byte, loc []string, msg string) []byte {
	return appendValidationTyped(b, loc, msg, "value_error")
}

// appendValidationTyped is appendValidation with the error's type (e.g.
// "string_pattern_mismatch", "missing").
func appendValidationTyped(b []byte, loc []string, msg, typ string) []byte {
	o := beginObj(b)
	o.key("detail")
	o.buf = append(o.buf, '[')
	e := beginObj(o.buf)
	e.key("loc")
	e.buf = append(e.buf, '[')
	for i, l := range loc {
		if i > 0 {
			e.buf = append(e.buf, ',')
		}
		e.buf = appendString(e.buf, l)
	}
	e.buf = append(e.buf, ']')
	e.str("msg", msg)
	e.str("type", typ)
	o.buf = append(e.end(), ']')
	return o.end()
}
