package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Terminal safety: text that enqueue prints comes partly from others (chat ids, agent
// answers, tool names, error texts from Letta). A control character in it could retitle,
// clear or reprogram the operator's terminal (ESC ]0;…BEL, ESC [2J, a C1 CSI). Every
// printer of enqueue writes such text through termSafe (or termWriter, or jsonTermSafe for
// JSON), which shows control characters as Go-style escapes instead.

// termSafe returns s with every control character escaped: C0 (U+0000–U+001F), DEL, C1
// (U+0080–U+009F), the bidirectional embedding, override and isolate controls (isBidiControl)
// and bytes that are not UTF-8 (a lone 0x9B is CSI on an 8-bit terminal).
// With multiline, newline and tab pass (answer text); otherwise they are escaped too (a
// table cell, an id, a status line). The result holds no control character but those.
func termSafe(s string, multiline bool) string {
	if !needsTermEscape(s, multiline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == 0x1b:
			b.WriteString(`\x1b`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r >= 0x80 && r <= 0x9f, isBidiControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+n])
		}
		i += n
	}
	return b.String()
}

func needsTermEscape(s string, multiline bool) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1, r == 0x7f, r >= 0x80 && r <= 0x9f, isBidiControl(r):
			return true
		case r < 0x20:
			if !multiline || r != '\n' && r != '\t' {
				return true
			}
		}
		i += n
	}
	return false
}

// isBidiControl reports whether r is a bidirectional embedding, override or isolate control
// (U+202A–U+202E, U+2066–U+2069): it reorders the text after it on the screen ("Trojan
// Source"), so that an id or a line reads as something it is not.
func isBidiControl(r rune) bool { return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 }

// termWriter escapes control characters (but newline and tab) in everything written
// through it: enqueue's stderr, where errors and plain progress lines go. Each Write is
// escaped on its own, so a caller writes whole lines (fmt.Fprint* does).
type termWriter struct{ w io.Writer }

func (t termWriter) Write(p []byte) (int, error) {
	s := termSafe(string(p), true)
	if _, err := io.WriteString(t.w, s); err != nil {
		return 0, err
	}
	return len(p), nil
}

// jsonTermSafe rewrites the C1 controls, DEL and bidirectional controls that encoding/json
// leaves raw (it escapes C0 itself) as \u escapes: the same JSON value, safe on a terminal. b must be
// encoding/json's output (valid UTF-8, where such runes occur only inside strings).
func jsonTermSafe(b []byte) []byte {
	unsafe := func(r rune) bool { return r == 0x7f || r >= 0x80 && r <= 0x9f || isBidiControl(r) }
	if !bytes.ContainsFunc(b, unsafe) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, n := utf8.DecodeRune(b[i:])
		if unsafe(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

// writeJSON writes v as one line of JSON (indented with indent), terminal-safe.
func writeJSON(w io.Writer, v any, indent bool) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if indent {
		enc.SetIndent("", "  ")
	}
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(jsonTermSafe(buf.Bytes()))
	return err
}
