package queueweights

import "testing"

// Highest weight first, ties by name; empty for none.
func TestString(t *testing.T) {
	for _, c := range []struct {
		q    map[string]int
		want string
	}{
		{map[string]int{"lettaq": 1, "critical": 6, "b": 1}, "critical=6,b=1,lettaq=1"},
		{nil, ""},
	} {
		if got := String(c.q); got != c.want {
			t.Errorf("String(%v) = %q, want %q", c.q, got, c.want)
		}
	}
}
