package codec

import (
	"encoding/json"
	"testing"
	"time"
)

// TestAppendMatchesMarshal: AppendString and AppendTime write what
// json.Marshal writes (the record encoders in package queue are held to
// json.Marshal as a whole by their own tests and fuzzers).
func TestAppendMatchesMarshal(t *testing.T) {
	for _, s := range []string{"", "plain", `q"b\s`, "<a&b>", "\x00\x1f\t\n\r\b\f", "\u2028\u2029", "é😀", "bad\xffutf8"} {
		want, _ := json.Marshal(s)
		if got := AppendString(nil, s); string(got) != string(want) {
			t.Errorf("AppendString(%q) = %s, want %s", s, got, want)
		}
	}
	for _, tm := range []time.Time{time.Date(2026, 11, 27, 16, 0, 0, 123, time.UTC),
		time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -7*3600))} {
		want, _ := json.Marshal(tm)
		ok := true
		if got := AppendTime(nil, tm, &ok); !ok || string(got) != string(want) {
			t.Errorf("AppendTime(%v) = %s (ok %v), want %s", tm, got, ok, want)
		}
	}
	ok := true
	if AppendTime(nil, time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC), &ok); ok {
		t.Error("AppendTime of year 10000: ok, want not (json.Marshal refuses it)")
	}
}
