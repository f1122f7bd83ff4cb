package queue

import (
	"encoding/json"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// The journal record's JSON, written by hand: encoding/json's reflection
// was ~10% of the CPU of an instant turn (up to three saves each). The
// output is byte for byte what json.Marshal writes (field order,
// omitempty and omitzero, RFC 3339 times, HTML-safe string escaping,
// invalid UTF-8 as \ufffd); TestTurnRecordJSONMatches and
// FuzzTurnRecordJSONMatches hold it to that. A time json.Marshal refuses
// (a year outside [0,9999], a zone hour outside [0,23]) makes
// marshalTurnRecord fall back to json.Marshal, which returns its error.
// The same for an Intent (marshalIntent).

// journalBufs holds the scratch buffers records are encoded into.
var journalBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// journalBufKeep bounds the scratch buffer a pool entry keeps.
const journalBufKeep = 64 << 10

// marshalTurnRecord is json.Marshal(r), by appendTurnRecordJSON.
func marshalTurnRecord(r *TurnRecord) ([]byte, error) {
	bp := journalBufs.Get().(*[]byte)
	b, ok := appendTurnRecordJSON((*bp)[:0], r)
	var out []byte
	if ok {
		out = append([]byte(nil), b...)
	}
	if cap(b) <= journalBufKeep {
		*bp = b[:0]
		journalBufs.Put(bp)
	}
	if !ok {
		rc := *r // only this copy escapes (to json.Marshal): r stays where it is
		return json.Marshal(&rc)
	}
	return out, nil
}

// appendTurnRecordJSON appends r as json.Marshal writes it; !ok when r
// holds a time json.Marshal refuses (b is then garbage).
func appendTurnRecordJSON(b []byte, r *TurnRecord) (_ []byte, ok bool) {
	ok = true
	b = append(b, `{"task_id":`...)
	b = appendJSONString(b, r.TaskID)
	b = appendStringField(b, `,"otid":`, r.Otid)
	b = appendStringField(b, `,"agent_id":`, r.AgentID)
	b = appendStringField(b, `,"run_id":`, r.RunID)
	b = append(b, `,"conversation":{"integration":`...)
	b = appendJSONString(b, r.Conversation.Integration)
	b = append(b, `,"chat_id":`...)
	b = appendJSONString(b, r.Conversation.ChatID)
	b = append(b, '}')
	b = appendStringField(b, `,"message_id":`, r.MessageID)
	b = appendStringField(b, `,"queue":`, r.Queue)
	b = appendStringField(b, `,"thread_mode":`, r.ThreadMode)
	b = appendStringField(b, `,"letta_conversation_id":`, r.LettaConversationID)
	b = appendTimeField(b, `,"enqueued_at":`, r.EnqueuedAt, &ok)
	b = appendTimeField(b, `,"first_started_at":`, r.FirstStartedAt, &ok)
	b = appendTimeField(b, `,"finished_at":`, r.FinishedAt, &ok)
	b = appendTimeField(b, `,"updated_at":`, r.UpdatedAt, &ok)
	b = appendIntField(b, `,"queue_wait_ns":`, int64(r.QueueWait))
	if len(r.Attempts) > 0 {
		b = append(b, `,"attempts":[`...)
		for i := range r.Attempts {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendAttemptJSON(b, &r.Attempts[i], &ok)
		}
		b = append(b, ']')
	}
	b = appendStringField(b, `,"outcome":`, r.Outcome)
	b = appendStringField(b, `,"error":`, r.Error)
	b = appendStringField(b, `,"stop_reason":`, r.StopReason)
	b = appendStringField(b, `,"partial_answer":`, r.PartialAnswer)
	b = appendIntField(b, `,"latency_ns":`, int64(r.Latency))
	b = appendIntField(b, `,"ttft_ns":`, int64(r.TTFT))
	if u := r.Usage; u != nil {
		b = appendUsageJSON(append(b, `,"usage":`...), u)
	}
	if len(r.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range r.Tools {
			t := &r.Tools[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = appendJSONString(b, t.Name)
			b = appendStringField(b, `,"call_id":`, t.CallID)
			b = appendIntField(b, `,"duration_ns":`, int64(t.Duration))
			b = appendStringField(b, `,"status":`, t.Status)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendStringsField(b, `,"warnings":`, r.Warnings)
	if a := r.Approval; a != nil {
		b = append(b, `,"approval":{"request_task_id":`...)
		b = appendJSONString(b, a.RequestTaskID)
		b = appendStringsField(b, `,"calls":`, a.Calls)
		b = appendTimeField(b, `,"requested_at":`, a.RequestedAt, &ok)
		b = appendTimeField(b, `,"expires_at":`, a.ExpiresAt, &ok)
		b = appendStringField(b, `,"answered_by":`, a.AnsweredBy)
		b = appendTimeField(b, `,"answered_at":`, a.AnsweredAt, &ok)
		b = appendStringField(b, `,"decision":`, a.Decision)
		b = appendStringField(b, `,"cause":`, a.Cause)
		b = appendIntField(b, `,"waited_ns":`, int64(a.Waited))
		b = append(b, '}')
	}
	b = appendIntField(b, `,"resends":`, int64(r.Resends))
	b = appendStringField(b, `,"answered_by":`, r.AnsweredBy)
	b = appendStringsField(b, `,"merged":`, r.Merged)
	b = append(b, '}')
	return b, ok
}

// marshalIntent is json.Marshal(in), by appendIntentJSON.
func marshalIntent(in *Intent) ([]byte, error) {
	var buf [256]byte
	b, ok := appendIntentJSON(buf[:0], in)
	if !ok {
		ic := *in
		return json.Marshal(&ic)
	}
	return append([]byte(nil), b...), nil
}

// appendIntentJSON appends in as json.Marshal writes it; !ok as for
// appendTurnRecordJSON.
func appendIntentJSON(b []byte, in *Intent) (_ []byte, ok bool) {
	ok = true
	b = append(b, `{"task_id":`...)
	b = appendJSONString(b, in.TaskID)
	b = append(b, `,"otid":`...)
	b = appendJSONString(b, in.Otid)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(in.Attempt), 10)
	b = appendStringField(b, `,"worker":`, in.Worker)
	b = append(b, `,"at":`...)
	b = appendJSONTime(b, in.At, &ok)
	if in.Refused {
		b = append(b, `,"refused":true`...)
	}
	return append(b, '}'), ok
}

func appendAttemptJSON(b []byte, a *Attempt, ok *bool) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(a.N), 10)
	b = appendStringField(b, `,"worker":`, a.Worker)
	b = appendTimeField(b, `,"start":`, a.Start, ok)
	b = appendTimeField(b, `,"end":`, a.End, ok)
	if len(a.Phases) > 0 {
		b = append(b, `,"phases":[`...)
		for i := range a.Phases {
			p := &a.Phases[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"phase":`...)
			b = appendJSONString(b, p.Phase)
			b = append(b, `,"at":`...)
			b = appendJSONTime(b, p.At, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = appendStringField(b, `,"timeout_clock":`, a.TimeoutClock)
	b = appendIntField(b, `,"polls":`, int64(a.Polls))
	b = appendIntField(b, `,"resumes":`, int64(a.Resumes))
	b = appendStringField(b, `,"resend_decision":`, a.ResendDecision)
	if a.SentOtid {
		b = append(b, `,"sent_otid":true`...)
	}
	b = appendStringField(b, `,"outcome":`, a.Outcome)
	b = appendStringField(b, `,"error":`, a.Error)
	return append(b, '}')
}

// closeObject ends an object opened at b[open] ('{') whose fields were
// each written with a leading comma: the first comma goes.
// appendUsageJSON appends u as json.Marshal writes a *Usage.
func appendUsageJSON(b []byte, u *Usage) []byte {
	o := len(b)
	b = append(b, '{')
	b = appendIntField(b, `,"prompt_tokens":`, int64(u.PromptTokens))
	b = appendIntField(b, `,"completion_tokens":`, int64(u.CompletionTokens))
	b = appendIntField(b, `,"total_tokens":`, int64(u.TotalTokens))
	b = appendIntField(b, `,"step_count":`, int64(u.StepCount))
	return closeObject(b, o)
}

func closeObject(b []byte, open int) []byte {
	if len(b) > open+1 {
		copy(b[open+1:], b[open+2:])
		b = b[:len(b)-1]
	}
	return append(b, '}')
}

// appendStringField appends key (`,"name":`) and s, unless s is empty
// (omitempty).
func appendStringField(b []byte, key, s string) []byte {
	if s == "" {
		return b
	}
	return appendJSONString(append(b, key...), s)
}

// appendIntField appends key and n, unless n is 0 (omitempty).
func appendIntField(b []byte, key string, n int64) []byte {
	if n == 0 {
		return b
	}
	return strconv.AppendInt(append(b, key...), n, 10)
}

// appendStringsField appends key and ss, unless ss is empty (omitempty).
func appendStringsField(b []byte, key string, ss []string) []byte {
	if len(ss) == 0 {
		return b
	}
	b = append(b, key...)
	b = append(b, '[')
	for i, s := range ss {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendJSONString(b, s)
	}
	return append(b, ']')
}

// appendTimeField appends key and t, unless t is zero (omitzero).
func appendTimeField(b []byte, key string, t time.Time, ok *bool) []byte {
	if t.IsZero() {
		return b
	}
	return appendJSONTime(append(b, key...), t, ok)
}

// appendJSONTime appends t as time.Time.MarshalJSON does; *ok becomes false
// where MarshalJSON fails.
func appendJSONTime(b []byte, t time.Time, ok *bool) []byte {
	b = append(b, '"')
	n0 := len(b)
	b = t.AppendFormat(b, time.RFC3339Nano)
	// MarshalJSON's checks (time.Time.appendStrictRFC3339).
	switch {
	case b[n0+len("9999")] != '-': // year not exactly 4 digits wide
		*ok = false
	case b[len(b)-1] != 'Z':
		c := b[len(b)-len("Z07:00")]
		h := 10*(b[len(b)-5]-'0') + (b[len(b)-4] - '0')
		if ('0' <= c && c <= '9') || h >= 24 {
			*ok = false
		}
	}
	return append(b, '"')
}

// jsonSafe marks the bytes below utf8.RuneSelf that encoding/json writes
// as they are (with HTML escaping, as json.Marshal does).
var jsonSafe = func() (t [utf8.RuneSelf]bool) {
	for c := 0x20; c < utf8.RuneSelf; c++ {
		switch c {
		case '"', '\\', '<', '>', '&':
		default:
			t[c] = true
		}
	}
	return t
}()

const jsonHex = "0123456789abcdef"

// appendJSONString appends s as a JSON string, as json.Marshal does
// (encoding/json's appendString with escapeHTML).
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if jsonSafe[c] {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', jsonHex[c>>4], jsonHex[c&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i++
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', jsonHex[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
