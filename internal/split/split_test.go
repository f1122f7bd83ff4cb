package split

import (
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestSplitMessage(t *testing.T) {
	flag := "🇩🇪"                // two regional indicators
	family := "👨\u200d👩\u200d👧" // ZWJ sequence
	cases := []struct {
		name  string
		text  string
		limit int
		want  []string
	}{
		{"empty", "", 10, nil},
		{"fits", "hello", 10, []string{"hello"}},
		{"exactly the limit", "hello", 5, []string{"hello"}},
		{"paragraph first", "aaa\n\nbbb\nccc", 10, []string{"aaa\n\n", "bbb\nccc"}},
		{"last paragraph that fits", "a\n\nb\n\ncc\n\nddddddd", 9, []string{"a\n\nb\n\n", "cc\n\n", "ddddddd"}},
		{"then line", "aaa\nbbb ccc\nddd", 10, []string{"aaa\n", "bbb ccc\n", "ddd"}},
		{"line beats word", "aa bb\ncc dd ee", 9, []string{"aa bb\n", "cc dd ee"}},
		{"then word", "the quick brown fox", 10, []string{"the quick ", "brown fox"}},
		{"hard split", "abcdefghij", 4, []string{"abcd", "efgh", "ij"}},
		{"runes not bytes", "ééééé", 2, []string{"éé", "éé", "é"}},
		{"no-break space is not a break", "ab\u00a0cd", 4, []string{"ab\u00a0c", "d"}},
		{"crlf kept together", "abc\r\ndef", 4, []string{"abc", "\r\n", "def"}},
		{"combining mark stays", "abce\u0301f", 4, []string{"abc", "e\u0301f"}},
		{"flags stay whole", "x" + flag + flag, 6, []string{"x" + flag, flag}},
		{"flag parity", flag + flag + flag, 6, []string{flag, flag, flag}},
		{"zwj sequence stays", "ab" + family, 8, []string{"ab", family}},
		{"skin tone stays", "abc👍🏽", 5, []string{"abc", "👍🏽"}},
		{"cluster longer than limit", family, 3, []string{"👨\u200d", "👩\u200d", "👧"}},
		{"emoji count two units, as Telegram counts", "😀😀😀", 4, []string{"😀😀", "😀"}},
		{"an emoji alone may exceed a limit of one", "😀a", 1, []string{"😀", "a"}},
		{"default limit", strings.Repeat("a", 5000), 0, []string{strings.Repeat("a", 4096), strings.Repeat("a", 904)}},
		{"separator at the end of the part", "aaaa bbbb", 5, []string{"aaaa ", "bbbb"}},
		{"leading newline", "\n" + strings.Repeat("a", 6), 4, []string{"\n", "aaaa", "aa"}},
		{"invalid utf-8 kept", "ab\xffcd\xfe", 3, []string{"ab\xff", "cd\xfe"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Message(c.text, c.limit)
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("Message(%q, %d) = %q, want %q", c.text, c.limit, got, c.want)
			}
			splitCheck(t, c.text, c.limit, got)
		})
	}
}

// splitCheck asserts Message's promises.
func splitCheck(t *testing.T, text string, limit int, parts []string) {
	t.Helper()
	if limit <= 0 {
		limit = defaultSplitLimit
	}
	if strings.Join(parts, "") != text {
		t.Fatalf("parts %q do not join to %q", parts, text)
	}
	if text == "" && len(parts) != 0 {
		t.Fatalf("empty text gave %d parts", len(parts))
	}
	for i, p := range parts {
		if p == "" {
			t.Fatalf("part %d is empty: %q", i, parts)
		}
		if n := utf16Len(p); n > limit && utf8.RuneCountInString(p) > 1 {
			t.Fatalf("part %d has %d UTF-16 units, limit %d", i, n, limit)
		}
		if utf8.ValidString(text) && !utf8.ValidString(p) {
			t.Fatalf("part %d cut inside a rune: %q", i, p)
		}
	}
}

func TestSplitMessageRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "b", " ", "\n", "\n\n", "é", "€", "𝄞", "🇩", "🇪", "\u200d", "\u0301", "👍", "🏽", "\r\n", "\u00a0", "\xff"}
	for range 3000 {
		var b strings.Builder
		for range r.IntN(200) {
			b.WriteString(alphabet[r.IntN(len(alphabet))])
		}
		limit := 1 + r.IntN(20)
		splitCheck(t, b.String(), limit, Message(b.String(), limit))
	}
}

func FuzzSplitMessage(f *testing.F) {
	seeds := []struct {
		s string
		n int
	}{
		{"", 0}, {"hello world", 3}, {"a\n\nb\nc d", 2}, {"🇩🇪🇩🇪🇩", 1}, {"👨\u200d👩\u200d👧", 2},
		{"e\u0301e\u0301", 1}, {"\xff\xfe\xe2\x82", 2}, {strings.Repeat("word ", 2000), 0}, {"x\r\ny", 2},
	}
	for _, s := range seeds {
		f.Add(s.s, s.n)
	}
	f.Fuzz(func(t *testing.T, text string, limit int) {
		if limit > 5000 || limit < -1 {
			limit = limit%5000 + 1
			if limit < 1 {
				limit = -limit + 1
			}
		}
		splitCheck(t, text, limit, Message(text, limit))
	})
}
