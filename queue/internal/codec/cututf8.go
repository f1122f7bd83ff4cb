package codec

import "unicode/utf8"

// CutUTF8 returns the longest prefix of s of at most n bytes that does
// not end inside a rune.
func CutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && i > n-utf8.UTFMax && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i]
}
