package codec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"
)

// Keys of a JSON object as encoding/json matches them to a struct's
// fields: FindKeyFault finds a key given twice in one object (encoding/json
// would take the last, and match keys without regard to case and escapes)
// or a key no field matches (encoding/json would drop it).

// KeyFault is a key given twice in one object, or (unknown) a key that no
// field of the schema matches.
type KeyFault struct {
	Path         string // "message_id", "conversation.chat_id", "images[1].url"
	First, Again string // the key as decoded, at its first and second appearance
	Unknown      bool
}

// FindKeyFault returns the first key given twice in one object of the
// JSON value at the start of b, or a key that no field of schema matches
// (unknown), or nil. The payload's own objects compare keys as
// encoding/json matches them to fields (folded, escapes decoded); the
// top-level "metadata" map compares them as written, and takes any key. It
// reads what it can of malformed JSON and stops there (the decoder names
// that fault).
func FindKeyFault(b []byte, schema Fields) *KeyFault {
	s := keyScan{b: b, keys: make([]seenKey, 0, 14)} // room for a payload's keys, nested
	return s.value(0, false, schema)
}

// Fields is the keys an object may hold (folded, as encoding/json
// matches them to fields), each with the fields of its value when that is
// an object or an array of objects (nil: any value).
type Fields map[string]Fields

// FieldsOf is the Fields of values of type t, from its json tags (nil
// for a value that is not a struct or a slice of structs).
func FieldsOf(t reflect.Type) Fields {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct || t == reflect.TypeFor[time.Time]() {
		return nil
	}
	f := Fields{}
	for i := range t.NumField() {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		f[string(FoldKey([]byte(name)))] = FieldsOf(sf.Type)
	}
	return f
}

// keyScan walks JSON bytes, from i. keys holds the keys of the objects
// being scanned, innermost last (one slice for the whole scan).
type keyScan struct {
	b    []byte
	i    int
	keys []seenKey
}

// seenKey is a key of an object: as compared (folded, unless a map's) and
// as decoded. Both alias b when the key is plain lower-case ASCII as
// written, as a payload's keys are.
type seenKey struct{ cmp, key []byte }

// linearKeys is how many keys of one object are compared one by one; past
// it, a map (a hostile object of many keys costs no more than its size).
const linearKeys = 32

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

// value scans one value at depth; mapKeys: it is the metadata map; schema:
// the keys its objects may hold (nil: any).
func (s *keyScan) value(depth int, mapKeys bool, schema Fields) *KeyFault {
	s.space()
	if s.i >= len(s.b) {
		return nil
	}
	switch s.b[s.i] {
	case '{':
		return s.object(depth, mapKeys, schema)
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
			if d := s.value(depth+1, false, schema); d != nil {
				d.Path = "[" + strconv.Itoa(n) + "]" + childPath(d.Path)
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
func (s *keyScan) object(depth int, mapKeys bool, schema Fields) *KeyFault {
	s.i++
	first := len(s.keys)
	defer func() { s.keys = s.keys[:first] }()
	var many map[string]int // past linearKeys: compared form → index in s.keys
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
			cmp = FoldKey(key)
		}
		prev := -1
		if many != nil {
			if k, ok := many[string(cmp)]; ok {
				prev = k
			}
		} else {
			for k := first; k < len(s.keys); k++ {
				if bytes.Equal(s.keys[k].cmp, cmp) {
					prev = k
					break
				}
			}
		}
		if prev >= 0 {
			return &KeyFault{Path: string(s.keys[prev].key), First: string(s.keys[prev].key), Again: string(key)}
		}
		var child Fields
		if schema != nil && !mapKeys {
			var known bool
			if child, known = schema[string(cmp)]; !known {
				return &KeyFault{Path: string(key), Unknown: true}
			}
		}
		s.keys = append(s.keys, seenKey{cmp: cmp, key: key})
		if many == nil && len(s.keys)-first > linearKeys {
			many = make(map[string]int)
			for k := first; k < len(s.keys); k++ {
				many[string(s.keys[k].cmp)] = k
			}
		} else if many != nil {
			many[string(cmp)] = len(s.keys) - 1
		}
		if d := s.value(depth+1, depth == 0 && string(cmp) == "metadata", child); d != nil {
			d.Path = string(key) + childPath(d.Path)
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
// as U+FFFD); a plain key is its bytes in b.
func jsonKey(raw []byte) []byte {
	if len(raw) >= 2 && bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return raw[1 : len(raw)-1]
	}
	var k string
	if json.Unmarshal(raw, &k) != nil {
		return raw
	}
	return []byte(k)
}

// FoldKey folds a key so that two keys fold alike exactly when
// encoding/json matches them to the same field (its fold.go: ASCII letters
// upper case, any other rune the smallest of its case-folding set); here
// ASCII letters come out lower case, so that a lower-case ASCII key is its
// own fold (and no copy is made).
func FoldKey(k []byte) []byte {
	plain := true
	for _, c := range k {
		if c >= utf8.RuneSelf || 'A' <= c && c <= 'Z' {
			plain = false
			break
		}
	}
	if plain {
		return k
	}
	out := make([]byte, 0, len(k))
	for i := 0; i < len(k); {
		r, n := utf8.DecodeRune(k[i:])
		if r >= utf8.RuneSelf {
			r = foldRune(r) // may be ASCII: the Kelvin sign is K
		}
		if 'A' <= r && r <= 'Z' {
			r += 'a' - 'A'
		}
		out = utf8.AppendRune(out, r)
		i += n
	}
	return out
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
