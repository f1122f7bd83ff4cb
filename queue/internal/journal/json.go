package journal

import (
	"encoding/json"
	"fmt"
	"strconv"
	"sync"

	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/record"
)

// The journal record's JSON (and an intent's), read by encoding/json and
// written by hand: encoding/json's reflection was ~10% of the CPU of an instant turn (up to three saves each). The
// output is byte for byte what json.Marshal writes (field order,
// omitempty and omitzero, RFC 3339 times, HTML-safe string escaping,
// invalid UTF-8 as \ufffd); TestTurnRecordJSONMatches and
// FuzzTurnRecordJSONMatches hold it to that. A time json.Marshal refuses
// (a year outside [0,9999], a zone hour outside [0,23]) makes
// MarshalRecord fall back to json.Marshal, which returns its error.
// The same for an Intent (MarshalIntent).

// journalBufs holds the scratch buffers records are encoded into.
var journalBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// journalBufKeep bounds the scratch buffer a pool entry keeps.
const journalBufKeep = 64 << 10

// MarshalRecord is json.Marshal(r), by appendTurnRecordJSON.
func MarshalRecord(r *record.TurnRecord) ([]byte, error) {
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
func appendTurnRecordJSON(b []byte, r *record.TurnRecord) (_ []byte, ok bool) {
	ok = true
	b = append(b, `{"task_id":`...)
	b = codec.AppendString(b, r.TaskID)
	b = codec.AppendStringField(b, `,"otid":`, r.Otid)
	b = codec.AppendStringField(b, `,"agent_id":`, r.AgentID)
	b = codec.AppendStringField(b, `,"run_id":`, r.RunID)
	b = append(b, `,"conversation":{"integration":`...)
	b = codec.AppendString(b, r.Conversation.Integration)
	b = append(b, `,"chat_id":`...)
	b = codec.AppendString(b, r.Conversation.ChatID)
	b = append(b, '}')
	b = codec.AppendStringField(b, `,"message_id":`, r.MessageID)
	b = codec.AppendStringField(b, `,"queue":`, r.Queue)
	b = codec.AppendStringField(b, `,"thread_mode":`, r.ThreadMode)
	b = codec.AppendStringField(b, `,"letta_conversation_id":`, r.LettaConversationID)
	b = codec.AppendTimeField(b, `,"enqueued_at":`, r.EnqueuedAt, &ok)
	b = codec.AppendTimeField(b, `,"first_started_at":`, r.FirstStartedAt, &ok)
	b = codec.AppendTimeField(b, `,"finished_at":`, r.FinishedAt, &ok)
	b = codec.AppendTimeField(b, `,"updated_at":`, r.UpdatedAt, &ok)
	b = codec.AppendIntField(b, `,"queue_wait_ns":`, int64(r.QueueWait))
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
	if len(r.Waits) > 0 {
		b = append(b, `,"waits":[`...)
		for i := range r.Waits {
			wt := &r.Waits[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"from":`...)
			b = codec.AppendTime(b, wt.From, &ok)
			b = codec.AppendTimeField(b, `,"until":`, wt.Until, &ok)
			b = append(b, `,"behind":`...)
			b = codec.AppendString(b, wt.Behind)
			b = codec.AppendStringField(b, `,"reason":`, wt.Reason)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = codec.AppendStringField(b, `,"outcome":`, r.Outcome)
	b = codec.AppendStringField(b, `,"error":`, r.Error)
	b = codec.AppendStringField(b, `,"stop_reason":`, r.StopReason)
	b = codec.AppendStringField(b, `,"partial_answer":`, r.PartialAnswer)
	b = codec.AppendIntField(b, `,"latency_ns":`, int64(r.Latency))
	b = codec.AppendIntField(b, `,"ttft_ns":`, int64(r.TTFT))
	if u := r.Usage; u != nil {
		b = AppendUsageJSON(append(b, `,"usage":`...), u)
	}
	if len(r.Tools) > 0 {
		b = append(b, `,"tools":[`...)
		for i := range r.Tools {
			t := &r.Tools[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"name":`...)
			b = codec.AppendString(b, t.Name)
			b = codec.AppendStringField(b, `,"call_id":`, t.CallID)
			b = codec.AppendIntField(b, `,"duration_ns":`, int64(t.Duration))
			b = codec.AppendStringField(b, `,"status":`, t.Status)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = codec.AppendStringsField(b, `,"warnings":`, r.Warnings)
	if a := r.Approval; a != nil {
		b = append(b, `,"approval":{"request_task_id":`...)
		b = codec.AppendString(b, a.RequestTaskID)
		b = codec.AppendStringsField(b, `,"calls":`, a.Calls)
		b = codec.AppendTimeField(b, `,"requested_at":`, a.RequestedAt, &ok)
		b = codec.AppendTimeField(b, `,"expires_at":`, a.ExpiresAt, &ok)
		b = codec.AppendStringField(b, `,"answered_by":`, a.AnsweredBy)
		b = codec.AppendTimeField(b, `,"answered_at":`, a.AnsweredAt, &ok)
		b = codec.AppendStringField(b, `,"decision":`, a.Decision)
		b = codec.AppendStringField(b, `,"cause":`, a.Cause)
		b = codec.AppendIntField(b, `,"waited_ns":`, int64(a.Waited))
		b = append(b, '}')
	}
	b = codec.AppendIntField(b, `,"resends":`, int64(r.Resends))
	b = codec.AppendStringField(b, `,"answered_by":`, r.AnsweredBy)
	b = codec.AppendStringsField(b, `,"merged":`, r.Merged)
	if c := r.Cancel; c != nil {
		b = append(b, `,"cancel":{"by":`...)
		b = codec.AppendString(b, c.By)
		b = codec.AppendTimeField(b, `,"at":`, c.At, &ok)
		b = codec.AppendStringField(b, `,"reason":`, c.Reason)
		b = codec.AppendStringField(b, `,"phase":`, c.Phase)
		b = append(b, '}')
	}
	b = append(b, '}')
	return b, ok
}

// MarshalIntent is json.Marshal(in), by appendIntentJSON.
func MarshalIntent(in *record.Intent) ([]byte, error) {
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
func appendIntentJSON(b []byte, in *record.Intent) (_ []byte, ok bool) {
	ok = true
	b = append(b, `{"task_id":`...)
	b = codec.AppendString(b, in.TaskID)
	b = append(b, `,"otid":`...)
	b = codec.AppendString(b, in.Otid)
	b = append(b, `,"attempt":`...)
	b = strconv.AppendInt(b, int64(in.Attempt), 10)
	b = codec.AppendStringField(b, `,"worker":`, in.Worker)
	b = append(b, `,"at":`...)
	b = codec.AppendTime(b, in.At, &ok)
	if in.Refused {
		b = append(b, `,"refused":true`...)
	}
	return append(b, '}'), ok
}

func appendAttemptJSON(b []byte, a *record.Attempt, ok *bool) []byte {
	b = append(b, `{"n":`...)
	b = strconv.AppendInt(b, int64(a.N), 10)
	b = codec.AppendStringField(b, `,"worker":`, a.Worker)
	b = codec.AppendTimeField(b, `,"start":`, a.Start, ok)
	b = codec.AppendTimeField(b, `,"end":`, a.End, ok)
	if len(a.Phases) > 0 {
		b = append(b, `,"phases":[`...)
		for i := range a.Phases {
			p := &a.Phases[i]
			if i > 0 {
				b = append(b, ',')
			}
			b = append(b, `{"phase":`...)
			b = codec.AppendString(b, p.Phase)
			b = append(b, `,"at":`...)
			b = codec.AppendTime(b, p.At, ok)
			b = append(b, '}')
		}
		b = append(b, ']')
	}
	b = codec.AppendStringField(b, `,"timeout_clock":`, a.TimeoutClock)
	b = codec.AppendIntField(b, `,"polls":`, int64(a.Polls))
	b = codec.AppendIntField(b, `,"resumes":`, int64(a.Resumes))
	b = codec.AppendStringField(b, `,"resend_decision":`, a.ResendDecision)
	if a.SentOtid {
		b = append(b, `,"sent_otid":true`...)
	}
	b = codec.AppendStringField(b, `,"outcome":`, a.Outcome)
	b = codec.AppendStringField(b, `,"error":`, a.Error)
	b = codec.AppendIntField(b, `,"retry_in_ns":`, int64(a.RetryIn))
	b = codec.AppendStringField(b, `,"taken_over_from":`, a.TakenOverFrom)
	return append(b, '}')
}

// AppendUsageJSON appends u as json.Marshal writes a *record.Usage (in a
// record, and in a turn's task result).
func AppendUsageJSON(b []byte, u *record.Usage) []byte {
	o := len(b)
	b = append(b, '{')
	b = codec.AppendIntField(b, `,"prompt_tokens":`, int64(u.PromptTokens))
	b = codec.AppendIntField(b, `,"completion_tokens":`, int64(u.CompletionTokens))
	b = codec.AppendIntField(b, `,"total_tokens":`, int64(u.TotalTokens))
	b = codec.AppendIntField(b, `,"step_count":`, int64(u.StepCount))
	return codec.CloseObject(b, o)
}

// DecodeRecord reads the record of taskID stored as b.
func DecodeRecord(taskID string, b []byte) (*record.TurnRecord, error) {
	var rec record.TurnRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("queue: journal record %s: %w", taskID, err)
	}
	return &rec, nil
}

// DecodeIntents reads the intents of taskID stored as raw, oldest first.
func DecodeIntents(taskID string, raw []string) ([]record.Intent, error) {
	out := make([]record.Intent, 0, len(raw))
	for _, s := range raw {
		var in record.Intent
		if err := json.Unmarshal([]byte(s), &in); err != nil {
			// Never drop an intent silently: an unreadable one still means
			// something may have been sent.
			return nil, fmt.Errorf("queue: intents of task %s: bad entry %q: %w", taskID, s, err)
		}
		out = append(out, in)
	}
	return out, nil
}
