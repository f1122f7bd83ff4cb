// Package split cuts a message's text into parts for platforms that cap a
// message's length: the worker cuts an answer's parts (queue's reply
// events), a relay a notify's text, the same way.
package split

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// defaultSplitLimit is the part size Message uses when given none:
// Telegram's limit for a message's text.
const defaultSplitLimit = 4096

// Message cuts text into parts of at most limit UTF-16 code units
// (limit <= 0: defaultSplitLimit), for platforms that cap a message's length.
// Telegram and every JavaScript client count length in UTF-16 code units, in
// which a character outside the Basic Multilingual Plane (most emoji) counts
// two; a part within the limit in those units is within it in runes too.
//
// It cuts after the last paragraph break ("\n\n") that fits, else after the
// last line break, else after the last whitespace (not a no-break space, nor
// the "\r" of "\r\n"), else at the last grapheme-cluster boundary that fits
// (best effort: it keeps combining marks, variation selectors, emoji
// modifiers, ZWJ sequences, flag pairs and "\r\n" together), and only when a
// single cluster is longer than limit, at a rune boundary. Separators stay
// at the end of the part before the cut, so nothing is lost or added:
//
//	strings.Join(Message(text, limit), "") == text
//
// Every part is non-empty, and longer than limit only when it is a single
// rune of two units and limit is 1. Empty text gives no parts (nil); a text
// of at most limit units gives one part, itself. Invalid UTF-8 bytes count
// as one unit each and are kept as they are.
func Message(text string, limit int) []string {
	if limit <= 0 {
		limit = defaultSplitLimit
	}
	var parts []string
	for text != "" {
		end, whole := splitPrefixEnd(text, limit)
		if whole {
			parts = append(parts, text)
			break
		}
		cut := splitCut(text, end)
		parts = append(parts, text[:cut])
		text = text[cut:]
	}
	return parts
}

// splitPrefixEnd returns the byte length of the longest prefix of s that is
// at most n UTF-16 code units (at least one rune), and whether that is all
// of s.
func splitPrefixEnd(s string, n int) (end int, whole bool) {
	units := 0
	for end < len(s) {
		r, size := utf8.DecodeRuneInString(s[end:])
		u := 1
		if r > 0xffff {
			u = 2
		}
		if units+u > n && end > 0 {
			return end, false
		}
		units += u
		end += size
	}
	return end, true
}

// utf16Len is the length of s in UTF-16 code units (an invalid byte counts
// one).
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r > 0xffff {
			n++
		}
	}
	return n
}

// splitCut picks where to cut text within its first end bytes (0 < cut <= end).
func splitCut(text string, end int) int {
	window := text[:end]
	if i := strings.LastIndex(window, "\n\n"); i >= 0 {
		return i + 2
	}
	if i := strings.LastIndexByte(window, '\n'); i >= 0 {
		return i + 1
	}
	for p := len(window); p > 0; {
		r, size := utf8.DecodeLastRuneInString(window[:p])
		if splitIsBreakingSpace(r) && splitIsGraphemeBoundary(text, p) {
			return p
		}
		p -= size
	}
	// Hard cut: step back to a grapheme boundary, unless the cluster fills
	// the whole window.
	for p := end; p > 0; {
		if splitIsGraphemeBoundary(text, p) {
			return p
		}
		_, size := utf8.DecodeLastRuneInString(text[:p])
		p -= size
	}
	return end
}

func splitIsBreakingSpace(r rune) bool {
	switch r {
	case '\u00a0', '\u2007', '\u202f': // no-break spaces
		return false
	}
	return unicode.IsSpace(r)
}

// splitIsGraphemeBoundary approximates Unicode's extended grapheme cluster
// rules (UAX #29) at byte offset p, 0 < p < len(s).
func splitIsGraphemeBoundary(s string, p int) bool {
	prev, _ := utf8.DecodeLastRuneInString(s[:p])
	next, _ := utf8.DecodeRuneInString(s[p:])
	switch {
	case prev == '\r' && next == '\n':
		return false
	case prev == '\r' || prev == '\n':
		return true
	case splitIsExtend(next):
		return false
	case prev == '\u200d': // ZWJ joins what follows (emoji ZWJ sequences)
		return false
	case splitIsRegionalIndicator(prev) && splitIsRegionalIndicator(next):
		// Inside a flag when an odd number of indicators precede p.
		n := 0
		for q := p; q > 0; {
			r, size := utf8.DecodeLastRuneInString(s[:q])
			if !splitIsRegionalIndicator(r) {
				break
			}
			n++
			q -= size
		}
		return n%2 == 0
	}
	return true
}

// splitIsExtend reports runes that attach to the rune before them.
func splitIsExtend(r rune) bool {
	switch {
	case r == '\u200d', // zero width joiner
		r >= 0xfe00 && r <= 0xfe0f,                        // variation selectors
		r >= 0xe0100 && r <= 0xe01ef,                      // variation selectors supplement
		r >= 0x1f3fb && r <= 0x1f3ff,                      // emoji skin tone modifiers
		r >= 0xe0020 && r <= 0xe007f,                      // tags (subdivision flags)
		r >= 0x1160 && r <= 0x11ff,                        // Hangul jamo vowels and trailing consonants
		unicode.In(r, unicode.Mn, unicode.Me, unicode.Mc): // combining marks
		return true
	}
	return false
}

func splitIsRegionalIndicator(r rune) bool { return r >= 0x1f1e6 && r <= 0x1f1ff }
