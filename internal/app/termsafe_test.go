package app

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

func TestTermSafe(t *testing.T) {
	for _, c := range []struct {
		in              string
		multiline, line string
	}{
		{"plain text, ünïcode ✓", "plain text, ünïcode ✓", "plain text, ünïcode ✓"},
		{"\x1b]0;pwned\x07", `\x1b]0;pwned\x07`, `\x1b]0;pwned\x07`},
		{"\x1b[2J", `\x1b[2J`, `\x1b[2J`},
		{"a\nb\tc\rd", "a\nb\tc\\rd", `a\nb\tc\rd`},
		{"\u009b31m\u0085", `\u009b31m\u0085`, `\u009b31m\u0085`},
		{"del\x7f nul\x00", `del\x7f nul\x00`, `del\x7f nul\x00`},
		{"bad \x9b byte \xff", `bad \x9b byte \xff`, `bad \x9b byte \xff`},
	} {
		if got := termSafe(c.in, true); got != c.multiline {
			t.Errorf("termSafe(%q, multiline) = %q, want %q", c.in, got, c.multiline)
		}
		if got := termSafe(c.in, false); got != c.line {
			t.Errorf("termSafe(%q, one line) = %q, want %q", c.in, got, c.line)
		}
	}
	// JSON: the same value, with C1 and DEL escaped too.
	in := map[string]string{"chat": hostile + "\x7f"}
	b, _ := json.Marshal(in)
	safe := jsonTermSafe(b)
	assertNoInjection(t, "JSON", string(safe))
	var back map[string]string
	if err := json.Unmarshal(safe, &back); err != nil || back["chat"] != in["chat"] {
		t.Errorf("jsonTermSafe changed the value: %q → %q (%v)", b, safe, err)
	}
}

// TestTermSafeBidi: the bidirectional embedding, override and isolate controls (U+202A–U+202E,
// U+2066–U+2069: "Trojan Source") reorder what a terminal shows; they are escaped like the
// other controls, in text, in one-line cells and in JSON (which stays the same value).
func TestTermSafeBidi(t *testing.T) {
	for _, r := range []rune{0x202a, 0x202b, 0x202c, 0x202d, 0x202e, 0x2066, 0x2067, 0x2068, 0x2069} {
		s := "chat " + string(r) + "txt.exe"
		for _, multiline := range []bool{true, false} {
			got := termSafe(s, multiline)
			if strings.ContainsRune(got, r) || !strings.Contains(got, fmt.Sprintf(`\u%04x`, r)) {
				t.Errorf("termSafe(%q, %v) = %q, want U+%04X escaped", s, multiline, got, r)
			}
		}
		var buf strings.Builder
		if err := writeJSON(&buf, map[string]string{"chat_id": s}, false); err != nil {
			t.Fatal(err)
		}
		var back map[string]string
		if strings.ContainsRune(buf.String(), r) || json.Unmarshal([]byte(buf.String()), &back) != nil || back["chat_id"] != s {
			t.Errorf("writeJSON of %q = %q, want U+%04X escaped, the same value", s, buf.String(), r)
		}
	}
	if got := termSafe("שלום, مرحبا", false); got != "שלום, مرحبا" {
		t.Errorf("right-to-left text itself is changed: %q", got)
	}
}
