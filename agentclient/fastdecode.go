package agentclient

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"sync"
	"unicode/utf8"
)

// fastDecode fills w from one top-level JSON object without reflection on
// the common path: plain strings, integers, null and booleans are read in
// place; nested values (content lists, tool calls, …) are handed to
// encoding/json as the small slices they are. Anything it is not sure of
// (escapes it cannot copy, case-folded keys, type mismatches, malformed
// input) makes it return false, and the caller decodes with encoding/json,
// which is the reference: a differential fuzz test holds the two equal.
//
// Allocation: the scanner and its scratch come from a pool; the strings it
// returns go through an intern table, so the values every event repeats
// (run id, message type, dates, step and message ids, tool call ids) are
// allocated once. Everything w ends up holding is freshly allocated or an
// interned (immutable) string: nothing in w points into the pooled scratch,
// so a Message built from w stays valid after the next decode.
func fastDecode(b []byte, w *wireMessage) bool {
	s := getScan()
	defer s.release()
	return s.decode(b, w)
}

// decode fills w from b; s must come from getScan.
func (s *fscan) decode(b []byte, w *wireMessage) bool {
	s.b, s.i = b, 0
	s.ws()
	return s.object(func(key []byte) bool { return s.field(key, w) }) && s.end()
}

type fscan struct {
	b []byte
	i int

	// Scratch reused across decodes; never handed out (see fastDecode).
	buf   []byte           // a string's bytes while its escapes are decoded
	strs  []string         // a string list being read
	calls []ToolCall       // a tool_calls list being read
	rets  []ToolReturnItem // a tool_returns list being read
	tab   internTable

	w wireMessage // DecodeMessage's scratch

	// While lazyIDs is set (decodeStreamMessage), a plain id, date and run
	// id are kept as the input's bytes (idRaw, dateRaw, runRaw) and made
	// strings only once the message is known not to be a ping that repeats
	// the stream's last (the intern table, shared by every stream through
	// the pool, cannot hold the run ids of thousands of streams).
	lazyIDs                bool
	idRaw, dateRaw, runRaw []byte
	seq                    int64 // a seq_id read while lazyIDs is set
}

var scanPool = sync.Pool{New: func() any { return new(fscan) }}

func getScan() *fscan { return scanPool.Get().(*fscan) }

// release returns s to the pool, keeping no reference to the input nor a
// scratch buffer one large event grew.
func (s *fscan) release() {
	s.b, s.i = nil, 0
	if cap(s.buf) > scratchKeep {
		s.buf = nil
	}
	if cap(s.strs) > 64 {
		s.strs = nil
	}
	if cap(s.calls) > 64 {
		s.calls = nil
	}
	if cap(s.rets) > 64 {
		s.rets = nil
	}
	clear(s.strs[:cap(s.strs)])
	clear(s.calls[:cap(s.calls)])
	clear(s.rets[:cap(s.rets)])
	s.w = wireMessage{}
	s.lazyIDs, s.idRaw, s.dateRaw, s.runRaw = false, nil, nil, nil
	scanPool.Put(s)
}

// internSets and internMax size the intern table: a two-way set-associative
// cache of short strings (ids, dates, names, types), per pooled scanner.
// Longer strings (reasoning, answers, tool returns) are allocated as they
// come.
const (
	internSets = 128
	internMax  = 96
)

// internTable returns one string for equal byte sequences it has seen. A
// miss evicts the set's older entry: the cache saves allocations, never
// changes a value. The strings are immutable, so sharing them across
// messages and streams is safe.
type internTable struct {
	slots [2 * internSets]string // set i is slots[2i] (newer), slots[2i+1]
}

func (t *internTable) get(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	if len(b) > internMax {
		return string(b)
	}
	set := t.slots[2*(internHash(b)%internSets):][:2]
	if set[0] == string(b) {
		return set[0]
	}
	if set[1] == string(b) {
		set[0], set[1] = set[1], set[0]
		return set[0]
	}
	v := string(b)
	set[0], set[1] = v, set[0]
	return v
}

// internHash mixes b eight bytes at a time. It is deterministic (a test can
// count allocations); a peer that makes strings collide only costs
// allocations.
func internHash(b []byte) uint64 {
	const m = 0x9e3779b97f4a7c15
	h := uint64(len(b)) * m
	for ; len(b) >= 8; b = b[8:] {
		h = (h ^ binary.LittleEndian.Uint64(b)) * m
		h ^= h >> 29
	}
	var w uint64
	for i, c := range b {
		w |= uint64(c) << (8 * i)
	}
	h = (h ^ w) * m
	return h ^ h>>32
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

// escaped decodes a string whose escapes are all single-character ones,
// into s.buf: the result is valid until the next call.
func (s *fscan) escaped() ([]byte, bool) {
	out, ok := s.unescape(s.buf[:0])
	s.buf = out[:0]
	return out, ok
}

// unescape appends the string's decoded bytes to out; it returns out (to
// keep its capacity) even when it fails.
func (s *fscan) unescape(out []byte) ([]byte, bool) {
	if !s.eat('"') {
		return out, false
	}
	ascii := true
	for s.i < len(s.b) {
		c := s.b[s.i]
		switch {
		case c == '"':
			s.i++
			if !ascii && !utf8.Valid(out) {
				return out, false
			}
			return out, true
		case c < 0x20:
			return out, false
		case c == '\\':
			if s.i+1 >= len(s.b) {
				return out, false
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
				return out, false
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
	return out, false
}

// object walks an object's members, calling member with each key; member
// must consume the value.
func (s *fscan) object(member func(key []byte) bool) bool {
	if !s.eat('{') {
		return false
	}
	s.ws()
	if s.eat('}') {
		return true
	}
	for {
		s.ws()
		key, ok := s.plainRaw()
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
func (s *fscan) skipUnknown(key []byte) bool {
	for i := 0; i < len(key); i++ {
		if c := key[i]; c >= 0x80 || (c >= 'A' && c <= 'Z') {
			return false
		}
	}
	v, ok := s.value()
	return ok && json.Valid(v)
}

func (s *fscan) toolCall(tc *ToolCall) bool {
	return s.object(func(key []byte) bool {
		switch string(key) {
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
		// Collected in scratch, then copied out at its size: the message
		// keeps the copy, the scratch is reused.
		s.calls = s.calls[:0]
		ok := s.array(func() bool {
			s.calls = append(s.calls, ToolCall{})
			return s.toolCall(&s.calls[len(s.calls)-1])
		})
		if !ok {
			return false
		}
		*dst = append(make(ToolCalls, 0, len(s.calls)), s.calls...)
		return true
	}
	return false
}

func (s *fscan) toolReturns(dst *[]ToolReturnItem) bool {
	if s.null() {
		*dst = nil
		return true
	}
	s.rets = s.rets[:0]
	ok := s.array(func() bool {
		s.rets = append(s.rets, ToolReturnItem{})
		it := &s.rets[len(s.rets)-1]
		return s.object(func(key []byte) bool {
			switch string(key) {
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
				return s.strList(&it.Stdout)
			case "stderr":
				return s.strList(&it.Stderr)
			}
			return s.skipUnknown(key)
		})
	})
	if !ok {
		return false
	}
	*dst = append(make([]ToolReturnItem, 0, len(s.rets)), s.rets...)
	return true
}

// strList reads a list of strings (or null) into a fresh slice. Anything
// else in the list (null elements, numbers) is left to encoding/json.
func (s *fscan) strList(dst *[]string) bool {
	if s.null() {
		*dst = nil
		return true
	}
	if s.peek() != '[' {
		return s.nested(dst)
	}
	save := s.i
	s.strs = s.strs[:0]
	ok := s.array(func() bool {
		if s.peek() != '"' {
			return false
		}
		v, ok := s.str()
		s.strs = append(s.strs, v)
		return ok
	})
	if !ok {
		s.i = save
		return s.nested(dst)
	}
	*dst = append(make([]string, 0, len(s.strs)), s.strs...)
	return true
}

// str reads a string value. Simple escapes are decoded here; \u escapes
// and invalid UTF-8 are left to encoding/json. Short strings are interned.
func (s *fscan) str() (string, bool) {
	save := s.i
	if raw, ok := s.plainRaw(); ok {
		return s.tab.get(raw), true
	}
	s.i = save
	if raw, ok := s.escaped(); ok {
		return s.tab.get(raw), true
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

// typeField is strField for message_type: the types Letta sends are
// constants, whatever the intern table holds.
func (s *fscan) typeField(dst *string) bool {
	save := s.i
	if raw, ok := s.plainRaw(); ok {
		if t := knownType(raw); t != "" {
			*dst = t
			return true
		}
	}
	s.i = save
	return s.strField(dst)
}

func knownType(b []byte) string {
	switch string(b) {
	case TypePing:
		return TypePing
	case TypeReasoning:
		return TypeReasoning
	case TypeHiddenReasoning:
		return TypeHiddenReasoning
	case TypeAssistant:
		return TypeAssistant
	case TypeToolCall:
		return TypeToolCall
	case TypeToolReturn:
		return TypeToolReturn
	case TypeApprovalRequest:
		return TypeApprovalRequest
	case TypeApprovalResponse:
		return TypeApprovalResponse
	case TypeError:
		return TypeError
	case TypeStopReason:
		return TypeStopReason
	case TypeUsage:
		return TypeUsage
	case TypeUser:
		return TypeUser
	case TypeSystem:
		return TypeSystem
	}
	return ""
}

// lazyStrField is strField for a value whose string is made later, if at
// all (see lazyIDs): a plain string's bytes go to *raw, and *dst is set
// from them by strings; any other string is set at once.
func (s *fscan) lazyStrField(dst *string, raw *[]byte) bool {
	if s.null() {
		return true
	}
	save := s.i
	if b, ok := s.plainRaw(); ok {
		*dst, *raw = "", b
		return true
	}
	s.i = save
	*raw = nil
	return s.strField(dst)
}

// strings turns the bytes lazyStrField kept into w's strings, and moves a
// seq_id out of the scratch.
func (s *fscan) strings(w *wireMessage) {
	if w.SeqID == &s.seq {
		seq := s.seq
		w.SeqID = &seq
	}
	if s.idRaw != nil {
		w.ID = s.tab.get(s.idRaw)
	}
	if s.dateRaw != nil {
		w.Date = s.tab.get(s.dateRaw)
	}
	if s.runRaw != nil {
		w.RunID = s.tab.get(s.runRaw)
	}
	s.idRaw, s.dateRaw, s.runRaw = nil, nil, nil
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
	if err != nil || v[0] == '+' || (len(v) > 1 && v[0] == '0') || (len(v) > 2 && v[0] == '-' && v[1] == '0') {
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

func (s *fscan) field(key []byte, w *wireMessage) bool {
	switch string(key) {
	case "id":
		if s.lazyIDs {
			return s.lazyStrField(&w.ID, &s.idRaw)
		}
		return s.strField(&w.ID)
	case "date":
		if s.lazyIDs {
			return s.lazyStrField(&w.Date, &s.dateRaw)
		}
		return s.strField(&w.Date)
	case "name":
		return s.strField(&w.Name)
	case "message_type":
		return s.typeField(&w.MessageType)
	case "otid":
		return s.strField(&w.Otid)
	case "sender_id":
		return s.strField(&w.SenderID)
	case "step_id":
		return s.strField(&w.StepID)
	case "is_err":
		return s.boolField(&w.IsErr)
	case "seq_id":
		if s.lazyIDs {
			// Into scratch: decodeStreamMessage copies it out unless the
			// message is a ping that repeats the last.
			if s.null() {
				w.SeqID = nil
				return true
			}
			if !s.intField(&s.seq) {
				return false
			}
			w.SeqID = &s.seq
			return true
		}
		return s.intPtrField(&w.SeqID)
	case "run_id":
		if s.lazyIDs {
			return s.lazyStrField(&w.RunID, &s.runRaw)
		}
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
		w.tc = ToolCall{}
		w.ToolCall = &w.tc // typed copies it out
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
		return s.strList(&w.Stdout)
	case "stderr":
		return s.strList(&w.Stderr)
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
		return s.strList(&w.RunIDs)
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
