package queue

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode"
	"unicode/utf8"
)

// Duplicate keys in a payload. encoding/json takes the last of a key given
// twice in one object, matches the payload's fields without regard to case
// (and to escapes), and leaves a field unchanged for a null: so
// {"message_id":"\ud800","message_id":null} decodes to U+FFFD while the raw
// copy the UTF-8 check reads is the null. A payload names each key once;
// duplicateKey finds the first that is given twice.

// keyDup is a key given twice in one object.
type keyDup struct {
	path         string // "message_id", "conversation.chat_id", "images[1].url"
	first, again string // the key as decoded, at its first and second appearance
}

// error returns the *ValidationError naming the key.
func (d *keyDup) error() error {
	if d.first == d.again {
		return invalid(d.path, "is given more than once (a payload names each key once)")
	}
	return invalid(d.path, "is given more than once, as %s and %s (keys match without regard to case; a payload names each key once)",
		strconv.Quote(d.first), strconv.Quote(d.again))
}

// duplicateKey returns the first key given twice in one object of the
// JSON value at the start of b, or nil. The payload's own objects compare
// keys as encoding/json matches them to fields (folded, escapes decoded);
// the top-level "metadata" map compares them as written. It reads what it
// can of malformed JSON and stops there (the decoder names that fault).
func duplicateKey(b []byte) *keyDup {
	s := keyScan{b: b}
	return s.value(0, false)
}

// keyScan walks JSON bytes, from i.
type keyScan struct {
	b []byte
	i int
}

func (s *keyScan) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// value scans one value at depth; mapKeys: it is the metadata map.
func (s *keyScan) value(depth int, mapKeys bool) *keyDup {
	s.space()
	if s.i >= len(s.b) {
		return nil
	}
	switch s.b[s.i] {
	case '{':
		return s.object(depth, mapKeys)
	case '[':
		s.i++
		for n := 0; ; n++ {
			s.space()
			if s.i >= len(s.b) {
				return nil
			}
			if s.b[s.i] == ']' {
				s.i++
				return nil
			}
			start := s.i
			if d := s.value(depth+1, false); d != nil {
				d.path = "[" + strconv.Itoa(n) + "]" + childPath(d.path)
				return d
			}
			s.space()
			if s.i < len(s.b) && s.b[s.i] == ',' {
				s.i++
			} else if s.i == start {
				return nil // malformed: no progress
			}
		}
	case '"':
		s.str()
	default: // a number, true, false or null
		for s.i < len(s.b) && !endsLiteral(s.b[s.i]) {
			s.i++
		}
	}
	return nil
}

// endsLiteral reports whether c ends a number or literal.
func endsLiteral(c byte) bool {
	switch c {
	case ',', ']', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

// object scans an object; s.b[s.i] is '{'.
func (s *keyScan) object(depth int, mapKeys bool) *keyDup {
	s.i++
	var seen map[string]string // compared form → the key as decoded
	for {
		s.space()
		if s.i >= len(s.b) {
			return nil
		}
		switch s.b[s.i] {
		case '}':
			s.i++
			return nil
		case ',':
			s.i++
			continue
		case '"':
		default:
			return nil // malformed
		}
		key := jsonKey(s.str())
		s.space()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return nil // malformed
		}
		s.i++
		cmp := key
		if !mapKeys {
			cmp = foldKey(key)
		}
		if first, ok := seen[cmp]; ok {
			return &keyDup{path: first, first: first, again: key}
		}
		if seen == nil {
			seen = make(map[string]string)
		}
		seen[cmp] = key
		if d := s.value(depth+1, depth == 0 && cmp == foldKey("metadata")); d != nil {
			d.path = key + childPath(d.path)
			return d
		}
	}
}

// childPath joins a child's path to its parent's.
func childPath(p string) string {
	if p == "" || p[0] == '[' {
		return p
	}
	return "." + p
}

// str scans a string and returns it as written, quotes included;
// s.b[s.i] is '"'.
func (s *keyScan) str() []byte {
	start := s.i
	s.i++
	for {
		k := bytes.IndexByte(s.b[s.i:], '"')
		if k < 0 {
			s.i = len(s.b)
			return s.b[start:]
		}
		s.i += k + 1
		n := 0 // backslashes before the quote
		for j := s.i - 2; j > start && s.b[j] == '\\'; j-- {
			n++
		}
		if n%2 == 0 {
			return s.b[start:s.i]
		}
	}
}

// jsonKey decodes a key as encoding/json does (escapes, and invalid UTF-8
// as U+FFFD).
func jsonKey(raw []byte) string {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1])
	}
	var k string
	if json.Unmarshal(raw, &k) != nil {
		return string(raw)
	}
	return k
}

// foldKey folds a key as encoding/json does to match it to a field
// (encoding/json's fold.go): ASCII letters upper case, any other rune the
// smallest of its case-folding set.
func foldKey(k string) string {
	var out []byte
	for i := 0; i < len(k); {
		if c := k[i]; c < utf8.RuneSelf {
			if 'a' <= c && c <= 'z' {
				c -= 'a' - 'A'
			}
			out = append(out, c)
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(k[i:])
		out = utf8.AppendRune(out, foldRune(r))
		i += n
	}
	return string(out)
}

// foldRune returns the smallest rune of r's case-folding set.
func foldRune(r rune) rune {
	for {
		r2 := unicode.SimpleFold(r)
		if r2 <= r {
			return r2
		}
		r = r2
	}
}
