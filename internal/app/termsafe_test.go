package app

import (
	"encoding/json"
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
