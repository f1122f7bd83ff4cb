package lettasim

import (
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// This file decodes a send request's body without reflection when it has the plain shape SDKs
// send: the known keys spelled exactly, once each; messages that are a non-empty list of
// "message"-type messages whose content is a string; booleans, integers, strings and nulls.
// Anything else (an unknown or differently cased key, a duplicate, content parts, approvals,
// a malformed body) makes it give up, and encoding/json decodes the body as before, errors
// included. So it only accepts bodies that encoding/json decodes to the same values, which
// TestDecodeSendBodyMatchesJSON and FuzzDecodeSendBody check.

// preMessage is a message the fast path decoded: its JSON and its fields.
type preMessage struct {
	raw json.RawMessage
	m   messageCreate
}

// decodeSendBody decodes a send request's body into body (a zero sendBody), as json.Unmarshal
// does.
func decodeSendBody(raw []byte, body *sendBody) error {
	if fastSendBody(raw, body) {
		return nil
	}
	*body = sendBody{}
	return json.Unmarshal(raw, body)
}

// plainString reports whether v, put between quotes, is a JSON string whose value is v itself:
// valid UTF-8 without quotes, backslashes or control characters.
func plainString(v []byte) bool {
	ascii := true
	for _, c := range v {
		if c < 0x20 || c == '"' || c == '\\' {
			return false
		}
		if c >= utf8.RuneSelf {
			ascii = false
		}
	}
	return ascii || utf8.Valid(v)
}

// jscan reads JSON tokens from b[i:].
type jscan struct {
	b []byte
	i int
}

func (s *jscan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte (0 at the end).
func (s *jscan) peek() byte {
	s.ws()
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// lit consumes the literal l (after white space) if it is next.
func (s *jscan) lit(l string) bool {
	s.ws()
	if len(s.b)-s.i >= len(l) && string(s.b[s.i:s.i+len(l)]) == l {
		s.i += len(l)
		return true
	}
	return false
}

// strToken consumes a string token, quotes included; plain means it has no escapes and is
// valid UTF-8, so its bytes between the quotes are its value. An escape is skipped, not
// checked: a token with one is decoded by encoding/json (str), which checks it.
func (s *jscan) strToken() (tok []byte, plain, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	start := s.i
	s.i++
	plain = true
	for s.i < len(s.b) {
		switch c := s.b[s.i]; {
		case c == '"':
			s.i++
			tok = s.b[start:s.i]
			return tok, plain && utf8.Valid(tok), true
		case c == '\\':
			plain = false
			s.i += 2
		case c < 0x20:
			return nil, false, false
		default:
			s.i++
		}
	}
	return nil, false, false
}

// strRaw consumes a string and returns its token, checked.
func (s *jscan) strRaw() ([]byte, bool) {
	tok, plain, ok := s.strToken()
	return tok, ok && (plain || json.Valid(tok))
}

// str consumes a string and returns its value.
func (s *jscan) str() (string, bool) {
	tok, plain, ok := s.strToken()
	switch {
	case !ok:
		return "", false
	case plain:
		return string(tok[1 : len(tok)-1]), true
	}
	var v string
	if json.Unmarshal(tok, &v) != nil {
		return "", false
	}
	return v, true
}

// key consumes an object key and its colon. Only plain keys are taken: encoding/json would
// unescape one and match it to a field.
func (s *jscan) key() ([]byte, bool) {
	tok, plain, ok := s.strToken()
	if !ok || !plain || !s.lit(":") {
		return nil, false
	}
	return tok[1 : len(tok)-1], true
}

// boolean consumes true or false.
func (s *jscan) boolean() (bool, bool) {
	switch {
	case s.lit("true"):
		return true, true
	case s.lit("false"):
		return false, true
	}
	return false, false
}

// integer consumes a JSON number without fraction or exponent that fits an int.
func (s *jscan) integer() (int, bool) {
	s.ws()
	start := s.i
	if s.i < len(s.b) && s.b[s.i] == '-' {
		s.i++
	}
	digits := s.i
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		s.i++
	}
	if n := s.i - digits; n == 0 || n > 1 && s.b[digits] == '0' {
		return 0, false
	}
	v, err := strconv.ParseInt(string(s.b[start:s.i]), 10, strconv.IntSize)
	return int(v), err == nil
}

// members consumes an object, calling member after each key's colon; member consumes the value
// (or reports false to give up).
func (s *jscan) members(member func(k []byte) bool) bool {
	if !s.lit("{") {
		return false
	}
	if s.lit("}") {
		return true
	}
	for {
		k, ok := s.key()
		if !ok || !member(k) {
			return false
		}
		if s.lit("}") {
			return true
		}
		if !s.lit(",") {
			return false
		}
	}
}

var messageType = "message"

// fastSendBody is decodeSendBody's fast path; false: it gave up (body is then garbage).
func fastSendBody(raw []byte, body *sendBody) bool {
	s := jscan{b: raw}
	var seen uint16
	once := func(bit uint16) bool {
		if seen&bit != 0 {
			return false
		}
		seen |= bit
		return true
	}
	optBool := func(p **bool) bool {
		if s.lit("null") {
			*p = nil
			return true
		}
		v, ok := s.boolean()
		if ok {
			*p = &v
		}
		return ok
	}
	plainBool := func(p *bool) bool {
		if s.lit("null") {
			return true // encoding/json leaves a bool as it is
		}
		v, ok := s.boolean()
		*p = v
		return ok
	}
	ok := s.members(func(k []byte) bool {
		switch string(k) {
		case "messages":
			if !once(1) {
				return false
			}
			s.ws()
			start := s.i
			if s.lit("null") {
				body.Messages = raw[start:s.i]
				return true
			}
			msgs, ok := s.messages()
			body.Messages, body.pre = raw[start:s.i], msgs
			return ok
		case "input":
			if !once(2) {
				return false
			}
			s.ws()
			start := s.i
			if !s.lit("null") {
				if _, ok := s.strRaw(); !ok {
					return false
				}
			}
			body.Input = raw[start:s.i]
			return true
		case "streaming":
			return once(4) && optBool(&body.Streaming)
		case "stream_tokens":
			return once(8) && plainBool(&body.StreamTokens)
		case "include_pings":
			return once(16) && optBool(&body.IncludePings)
		case "background":
			return once(32) && plainBool(&body.Background)
		case "max_steps":
			if !once(64) {
				return false
			}
			if s.lit("null") {
				body.MaxSteps = nil
				return true
			}
			v, ok := s.integer()
			body.MaxSteps = &v
			return ok
		case "agent_id":
			if !once(128) {
				return false
			}
			if s.lit("null") {
				body.AgentID = nil
				return true
			}
			v, ok := s.str()
			body.AgentID = &v
			return ok
		}
		return false
	})
	s.ws()
	return ok && s.i == len(raw)
}

// messages consumes a non-empty list of messages of type "message" whose content is a string.
func (s *jscan) messages() ([]preMessage, bool) {
	if !s.lit("[") || s.peek() == ']' {
		return nil, false
	}
	var out []preMessage
	for {
		s.ws()
		start := s.i
		var pm preMessage
		var seen uint8
		once := func(bit uint8) bool {
			if seen&bit != 0 {
				return false
			}
			seen |= bit
			return true
		}
		// A null leaves a string as it is (and sets *string to nil).
		optStr := func(p *string) bool {
			if s.lit("null") {
				return true
			}
			v, ok := s.str()
			*p = v
			return ok
		}
		m := &pm.m
		ok := s.members(func(k []byte) bool {
			switch string(k) {
			case "type":
				if !once(1) {
					return false
				}
				if s.lit("null") {
					m.Type = nil
					return true
				}
				v, ok := s.str()
				if !ok || v != messageType {
					return false // approvals and the rest: the slow path
				}
				m.Type = &messageType
				return true
			case "role":
				if !once(2) {
					return false
				}
				if s.lit(`"user"`) { // the usual role, without its copy
					m.Role = "user"
					return true
				}
				return optStr(&m.Role)
			case "content":
				if !once(4) {
					return false
				}
				s.ws()
				cs := s.i
				if _, ok := s.strRaw(); !ok {
					return false // content parts or anything else: the slow path
				}
				m.Content = s.b[cs:s.i]
				return true
			case "otid":
				return once(8) && optStr(&m.Otid)
			case "sender_id":
				return once(16) && optStr(&m.SenderID)
			}
			return false
		})
		if !ok {
			return nil, false
		}
		pm.raw = s.b[start:s.i]
		out = append(out, pm)
		if s.lit("]") {
			return out, true
		}
		if !s.lit(",") {
			return nil, false
		}
	}
}
