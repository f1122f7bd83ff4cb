package hashtag

import "testing"

func TestHashTag(t *testing.T) {
	for prefix, want := range map[string]string{
		"{lettaq}:":      "lettaq",
		"app:{lq}:":      "lq",
		"{a}{b}:":        "a",
		"lettaq:":        "",
		"{}lettaq:":      "", // Redis hashes the whole key when the first {} is empty
		"{}{lettaq}:":    "",
		"{lettaq:":       "", // closed, if ever, somewhere in the rest of the key
		"lettaq}:{":      "",
		"}{lettaq}:":     "lettaq",
		"x{lettaq}{y}:z": "lettaq",
	} {
		if got := Of(prefix); got != want {
			t.Errorf("Of(%q) = %q, want %q", prefix, got, want)
		}
	}
}
