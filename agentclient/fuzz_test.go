package agentclient

import (
	"bytes"
	"errors"
	"io"
	"reflect"
	"testing"
)

func seedStream() []string {
	return []string{
		data(fxPing) + data(fxReasoning) + data(fxToolCall) + data(fxToolReturn) + data(fxAssistant) + data(fxStop) + data(fxUsage) + data("[DONE]"),
		"event: error\r\ndata: " + fxBareError + "\r\n\r\n",
		data(fxStopSpaced) + "data: [DONE]\n\n",
		data(fxDelta1) + data(fxDelta2) + data(fxDelta3),
		": comment\nid: 1\nretry: 5\ndata: a\ndata: b\n\n",
		"data: {\"half",
	}
}

// FuzzSSEStream feeds arbitrary bytes through the whole read path: it must
// never panic, and what it keeps is bounded by what it read.
func FuzzSSEStream(f *testing.F) {
	for _, s := range seedStream() {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		rd := newSSEReader(bytes.NewReader(in), 4096, 0, nil)
		st := NewStreamState()
		_, readErr := readEvents(rd, st, func(e Event) {
			if e.Message != nil {
				_ = e.Message.Base()
			}
		}, nil)
		if readErr != nil && !errors.Is(readErr, io.EOF) {
			t.Fatalf("read error from a bytes.Reader: %v", readErr)
		}
		s := st.Snapshot()
		total := len(s.Answer) + len(s.RunID)
		for _, step := range s.Transcript.Steps {
			total += len(step.Text) + len(step.Arguments) + len(step.ToolReturn)
		}
		if total > 2*len(in)+64 {
			t.Fatalf("state holds %d bytes from %d bytes of input", total, len(in))
		}
	})
}

// FuzzDecodeMessage: decoding and merging any JSON never panics.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{fxPing, fxReasoning, fxToolCall, fxToolReturn, fxAssistant, fxAssistList, fxStop,
		fxStopSpaced, fxUsage, fxErrorMsg, fxBareError, fxUnknown, fxHidden, fxUser, fxApproval, fxDelta1, fxDelta2, fxDelta3,
		`{"error":{"type":"llm_error","message":"m"}}`, `[]`, `null`, `{"message_type":"tool_call_message","tool_calls":[{},{}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		m, err := DecodeMessage(in)
		if err != nil {
			return
		}
		var tr Transcript
		tr.Apply(m, false)
		tr.Apply(m, true)
		_ = tr.Answer()
		_ = tr.UnansweredToolCalls()
		st := NewStreamState()
		st.Apply(m, false, timeZero)
		_ = st.Snapshot()
	})
}

// FuzzFastDecodeMatchesStd: the fast decoder agrees with encoding/json on
// every input it accepts, and never accepts what encoding/json rejects.
func FuzzFastDecodeMatchesStd(f *testing.F) {
	for _, s := range []string{fxPing, fxReasoning, fxToolCall, fxToolReturn, fxAssistant, fxAssistList, fxStop,
		fxStopSpaced, fxUsage, fxErrorMsg, fxBareError, fxUnknown, fxHidden, fxUser, fxApproval, fxDelta1, fxDelta2, fxDelta3,
		`{"id":"a","id":null}`, `{"seq_id":1,"seq_id":null}`, `{"ID":"x"}`, `{"reasoning":"a\u00e9\n"}`, `{"error":null}`,
		`{"message_type":"assistant_message","content":"x"} x`, `{"seq_id":1.5}`, `{"x":[1,{"y":"}"}]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		var w wireMessage
		if !fastDecode(in, &w) {
			return
		}
		fast := w.typed(in)
		std, err := decodeStd(in)
		if err != nil {
			t.Fatalf("fast path accepted input encoding/json rejects (%v): %q", err, in)
		}
		if !reflect.DeepEqual(fast, std) {
			t.Fatalf("fast %#v\nstd  %#v\ninput %q", fast, std, in)
		}
	})
}

// FuzzStreamDecodeMatches: a stream's decode (decodeStreamMessage) agrees
// with DecodeMessage on every input, but for a ping's id and date, which a
// stream leaves out; a ping that repeats the last is the last itself.
func FuzzStreamDecodeMatches(f *testing.F) {
	for _, s := range []string{fxPing, fxReasoning, fxToolCall, fxToolReturn, fxAssistant, fxStop, fxUsage, fxErrorMsg,
		fxBareError, fxUnknown, `{"message_type":"ping","seq_id":7,"run_id":"r"}`, `{"id":"a\n","id":"b","message_type":"ping"}`,
		`{"id":"a","id":"b\n","message_type":"reasoning_message","reasoning":"x"}`, `{"date":"d","date":null,"seq_id":2,"seq_id":3}`,
		`{"message_type":"ping","run_id":"r\u00e9"}`, `{"message_type":"ping","seq_id":1.5}`} {
		f.Add([]byte(s), []byte(`{"message_type":"ping","run_id":"r","seq_id":7}`))
	}
	f.Fuzz(func(t *testing.T, in, prev []byte) {
		want, werr := DecodeMessage(in)
		var last *Ping
		if m, err := decodeStreamMessage(prev, nil); err == nil {
			last, _ = m.(*Ping)
		}
		got, gerr := decodeStreamMessage(in, last)
		if (werr == nil) != (gerr == nil) {
			t.Fatalf("errors differ: DecodeMessage %v, stream %v; input %q", werr, gerr, in)
		}
		if wp, ok := want.(*Ping); ok {
			wp.ID, wp.Date = "", ""
			gp, ok := got.(*Ping)
			if !ok {
				t.Fatalf("stream decoded a ping as %T: %q", got, in)
			}
			if last != nil && reflect.DeepEqual(last, wp) && gp != last {
				t.Fatalf("a ping that repeats the last is a new one: %q after %q", in, prev)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("stream %#v\nwant   %#v\ninput %q", got, want, in)
		}
	})
}
