package agentclient

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// fastDecode fills w from one top-level JSON object without reflection on
// the common path: plain strings, integers, null and booleans are read in
// place; nested values (content lists, tool calls, …) are handed to
// encoding/json as the small slices they are. Anything it is not sure of
// (escapes it cannot copy, case-folded keys, type mismatches, malformed
// input) makes it return false, and the caller decodes with encoding/json,
// which is the reference: a differential fuzz test holds the two equal.
func fastDecode(b []byte, w *wireMessage) bool {
	s := fscan{b: b}
	s.ws()
	return s.object(func(key string) bool { return s.field(key, w) }) && s.end()
}

type fscan struct {
	b []byte
	i int
}

func (s *fscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *fscan) eat(c byte) bool {
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

func (s *fscan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *fscan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// rawString returns the bytes between the quotes of a string without
// escapes or control characters, and valid UTF-8; ok is false otherwise.
func (s *fscan) plainRaw() ([]byte, bool) {
	if !s.eat('"') {
		return nil, false
	}
	start := s.i
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			raw := s.b[start:s.i]
			s.i++
			if !ascii && !utf8.Valid(raw) {
				return nil, false
			}
			return raw, true
		case c == '\\' || c < 0x20:
			return nil, false
		case c >= 0x80:
			ascii = false
		}
		s.i++
	}
	return nil, false
}

// escaped decodes a string whose escapes are all single-character ones.
func (s *fscan) escaped() (string, bool) {
	if !s.eat('"') {
		return "", false
	}
	out := make([]byte, 0, 64)
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !ascii && !utf8.Valid(out) {
				return "", false
			}
			return string(out), true
		case c < 0x20:
			return "", false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return "", false
			}
			var r byte
			switch s.b[s.i+1] {
			case '"':
				r = '"'
			case '\\':
				r = '\\'
			case '/':
				r = '/'
			case 'b':
				r = '\b'
			case 'f':
				r = '\f'
			case 'n':
				r = '\n'
			case 'r':
				r = '\r'
			case 't':
				r = '\t'
			default:
				return "", false
			}
			out = append(out, r)
			s.i += 2
			continue
		case c >= 0x80:
			ascii = false
		}
		out = append(out, c)
		s.i++
	}
	return "", false
}

// object walks an object's members, calling member with each key; member
// must consume the value.
func (s *fscan) object(member func(key string) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		key, ok := s.plainString()
		if !ok {
			return false
		}
		s.ws()
		if !s.eat(':') {
			return false
		}
		s.ws()
		if !member(key) {
			return false
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		return s.eat('}')
	}
}

// array walks an array, calling elem for each element.
func (s *fscan) array(elem func() bool) bool {
	if !s.eat('[') {
		return false
	}
	s.ws()
	if s.eat(']') {
		return true
	}
	for {
		s.ws()
		if !elem() {
			return false
		}
		s.ws()
		if s.eat(',') {
			continue
		}
		return s.eat(']')
	}
}

// skipUnknown skips the value of a key encoding/json would ignore.
func (s *fscan) skipUnknown(key string) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c >= 0x80 || (c >= 'A' && c <= 'Z') {
			return false
		}
	}
	v, ok := s.value()
	return ok && json.Valid(v)
}

func (s *fscan) toolCall(tc *ToolCall) bool {
	return s.object(func(key string) bool {
		switch key {
		case "name":
			return s.strField(&tc.Name)
		case "arguments":
			return s.strField(&tc.Arguments)
		case "tool_call_id":
			return s.strField(&tc.ToolCallID)
		}
		return s.skipUnknown(key)
	})
}

func (s *fscan) toolCalls(dst *ToolCalls) bool {
	switch {
	case s.null():
		*dst = nil
		return true
	case s.peek() == '{':
		var one ToolCall
		if !s.toolCall(&one) {
			return false
		}
		*dst = ToolCalls{one}
		return true
	case s.peek() == '[':
		list := ToolCalls{}
		ok := s.array(func() bool {
			var one ToolCall
			if !s.toolCall(&one) {
				return false
			}
			list = append(list, one)
			return true
		})
		*dst = list
		return ok
	}
	return false
}

func (s *fscan) toolReturns(dst *[]ToolReturnItem) bool {
	if s.null() {
		*dst = nil
		return true
	}
	list := []ToolReturnItem{}
	ok := s.array(func() bool {
		var it ToolReturnItem
		ok := s.object(func(key string) bool {
			switch key {
			case "tool_return":
				if s.peek() == '"' {
					v, ok := s.str()
					it.ToolReturn = Content{Text: v}
					return ok
				}
				return s.nested(&it.ToolReturn)
			case "status":
				return s.strField(&it.Status)
			case "tool_call_id":
				return s.strField(&it.ToolCallID)
			case "stdout":
				return s.nested(&it.Stdout)
			case "stderr":
				return s.nested(&it.Stderr)
			}
			return s.skipUnknown(key)
		})
		list = append(list, it)
		return ok
	})
	*dst = list
	return ok
}

func (s *fscan) plainString() (string, bool) {
	raw, ok := s.plainRaw()
	return string(raw), ok
}

// str reads a string value. Simple escapes are decoded here; \u escapes
// and invalid UTF-8 are left to encoding/json.
func (s *fscan) str() (string, bool) {
	save := s.i
	if raw, ok := s.plainRaw(); ok {
		return string(raw), true
	}
	s.i = save
	if v, ok := s.escaped(); ok {
		return v, true
	}
	s.i = save
	v, ok := s.value()
	if !ok || len(v) == 0 || v[0] != '"' {
		return "", false
	}
	var out string
	if json.Unmarshal(v, &out) != nil {
		return "", false
	}
	return out, true
}

func (s *fscan) null() bool {
	if bytes.HasPrefix(s.b[s.i:], []byte("null")) {
		s.i += 4
		return true
	}
	return false
}

// value skips one JSON value and returns its bytes. It checks structure
// only loosely; callers hand the slice to encoding/json, which validates.
func (s *fscan) value() ([]byte, bool) {
	start := s.i
	depth := 0
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch c {
		case '"':
			s.i++
			for s.i < len(s.b) && s.b[s.i] != '"' {
				if s.b[s.i] == '\\' {
					s.i++
				}
				s.i++
			}
			if s.i >= len(s.b) {
				return nil, false
			}
			s.i++
		case '{', '[':
			depth++
			s.i++
		case '}', ']':
			if depth == 0 {
				return s.b[start:s.i], s.i > start
			}
			depth--
			s.i++
		case ',':
			if depth == 0 {
				return s.b[start:s.i], s.i > start
			}
			s.i++
		default:
			s.i++
		}
		if depth == 0 && s.i > start && (c == '"' || c == '}' || c == ']') {
			return s.b[start:s.i], true
		}
	}
	if depth == 0 && s.i > start {
		return s.b[start:s.i], true
	}
	return nil, false
}

// strField sets *dst from a string or leaves it on null, as encoding/json.
func (s *fscan) strField(dst *string) bool {
	if s.null() {
		return true
	}
	v, ok := s.str()
	if ok {
		*dst = v
	}
	return ok
}

func (s *fscan) intField(dst *int64) bool {
	if s.null() {
		return true
	}
	v, ok := s.value()
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
	if err != nil || (len(v) > 1 && v[0] == '0') || (len(v) > 2 && v[0] == '-' && v[1] == '0') {
		return false
	}
	*dst = n
	return true
}

func (s *fscan) intPtrField(dst **int64) bool {
	if s.null() {
		*dst = nil
		return true
	}
	var n int64
	if !s.intField(&n) {
		return false
	}
	*dst = &n
	return true
}

func (s *fscan) boolField(dst *bool) bool {
	switch {
	case s.null():
	case bytes.HasPrefix(s.b[s.i:], []byte("true")):
		s.i += 4
		*dst = true
	case bytes.HasPrefix(s.b[s.i:], []byte("false")):
		s.i += 5
		*dst = false
	default:
		return false
	}
	return true
}

// nested decodes a nested value with encoding/json.
func (s *fscan) nested(dst any) bool {
	v, ok := s.value()
	return ok && json.Unmarshal(v, dst) == nil
}

// flex reads a flexText: strings here, anything else via encoding/json.
func (s *fscan) flex(dst *flexText) bool {
	if s.peek() == '"' {
		v, ok := s.str()
		*dst = flexText(v)
		return ok
	}
	if s.null() {
		*dst = "" // as flexText.UnmarshalJSON("null")
		return true
	}
	return s.nested(dst)
}

func (s *fscan) raw(dst *json.RawMessage) bool {
	v, ok := s.value()
	if !ok || !json.Valid(v) {
		return false
	}
	*dst = append((*dst)[:0], v...)
	return true
}

func (s *fscan) field(key string, w *wireMessage) bool {
	switch key {
	case "id":
		return s.strField(&w.ID)
	case "date":
		return s.strField(&w.Date)
	case "name":
		return s.strField(&w.Name)
	case "message_type":
		return s.strField(&w.MessageType)
	case "otid":
		return s.strField(&w.Otid)
	case "sender_id":
		return s.strField(&w.SenderID)
	case "step_id":
		return s.strField(&w.StepID)
	case "is_err":
		return s.boolField(&w.IsErr)
	case "seq_id":
		return s.intPtrField(&w.SeqID)
	case "run_id":
		return s.strField(&w.RunID)
	case "reasoning":
		return s.strField(&w.Reasoning)
	case "source":
		return s.strField(&w.Source)
	case "signature":
		return s.strField(&w.Signature)
	case "state":
		return s.strField(&w.State)
	case "hidden_reasoning":
		return s.strField(&w.HiddenReasoning)
	case "content":
		if s.peek() == '"' {
			v, ok := s.str()
			if ok {
				w.Content = Content{Text: v}
			}
			return ok
		}
		return s.nested(&w.Content)
	case "tool_call":
		if s.null() {
			w.ToolCall = nil
			return true
		}
		if w.ToolCall != nil {
			return false // a repeated key merges in encoding/json: leave it to it
		}
		w.ToolCall = &ToolCall{}
		return s.toolCall(w.ToolCall)
	case "tool_calls":
		return s.toolCalls(&w.ToolCalls)
	case "tool_return":
		return s.flex(&w.ToolReturn)
	case "status":
		return s.strField(&w.Status)
	case "tool_call_id":
		return s.strField(&w.ToolCallID)
	case "stdout":
		return s.nested(&w.Stdout)
	case "stderr":
		return s.nested(&w.Stderr)
	case "tool_returns":
		if w.ToolReturns != nil {
			return false // a repeated key merges in encoding/json
		}
		return s.toolReturns(&w.ToolReturns)
	case "error_type":
		return s.strField(&w.ErrorType)
	case "message":
		return s.strField(&w.Message)
	case "detail":
		return s.flex(&w.Detail)
	case "error":
		return s.raw(&w.Error)
	case "code":
		return s.strField(&w.Code)
	case "stop_reason":
		return s.strField(&w.StopReason)
	case "completion_tokens":
		return s.intField(&w.CompletionTokens)
	case "prompt_tokens":
		return s.intField(&w.PromptTokens)
	case "total_tokens":
		return s.intField(&w.TotalTokens)
	case "step_count":
		return s.intField(&w.StepCount)
	case "run_ids":
		return s.nested(&w.RunIDs)
	case "cached_input_tokens":
		return s.intPtrField(&w.CachedInputTokens)
	case "cache_write_tokens":
		return s.intPtrField(&w.CacheWriteTokens)
	case "reasoning_tokens":
		return s.intPtrField(&w.ReasoningTokens)
	case "context_tokens":
		return s.intPtrField(&w.ContextTokens)
	}
	// An unknown key: encoding/json ignores it unless it case-folds to a
	// known one, so only plain lower-case ASCII keys are skipped here.
	return s.skipUnknown(key)
}
