package agentclient

import (
	"bytes"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// retainFrames is a stream's data lines for worker k: the step-mode bench
// stream plus the fixtures that fill lists (tool_calls, tool_returns with
// stdout, run_ids, content parts) and carry escapes, with every value made
// different per worker so that a buffer shared between two decodes would
// show up as one worker's text in another's message.
func retainFrames(k int) [][]byte {
	in, _ := stepModeStream(4)
	var frames [][]byte
	for _, f := range bytes.Split(in, []byte("\n\n")) {
		d := bytes.TrimPrefix(f, []byte("data: "))
		if len(d) == 0 || string(d) == "[DONE]" {
			continue
		}
		frames = append(frames, d)
	}
	for _, fx := range []string{fxToolCall, fxDelta1, fxDelta2, fxDelta3, fxAssistList, fxUser, fxHidden, fxUnknown, fxErrorMsg,
		`{"id":"message-s","message_type":"tool_return_message","run_id":"run-1","tool_return":"out\n\"q\"","status":"error","tool_call_id":"call-s","stdout":["a","b\tc"],"stderr":[],"tool_returns":[{"tool_return":"r1","status":"error","tool_call_id":"call-s","stdout":["x"],"stderr":["y","z"]},{"tool_return":"r2","status":"success","tool_call_id":"call-t","stdout":null,"stderr":null}]}`,
		`{"id":"message-t","message_type":"tool_call_message","run_id":"run-1","tool_calls":[{"name":"a","arguments":"{\"x\":1}","tool_call_id":"call-u"},{"name":"b","arguments":"{\"y\":2}","tool_call_id":"call-v"},{"name":"c","arguments":"{}","tool_call_id":"call-w"}]}`,
		fxUsage} {
		frames = append(frames, []byte(fx))
	}
	tag := fmt.Sprintf("w%d", k)
	// Values only: keys and message types stay as they are.
	r := strings.NewReplacer("Paris", "Paris-"+tag, `"message-`, `"message-`+tag+"-", `"call`, `"call`+tag,
		`"run-`, `"run-`+tag+"-", `"step-`, `"step-`+tag+"-", `"a"`, `"a`+tag+`"`, `:"results"`, `:"results-`+tag+`"`,
		"2026-01-01", fmt.Sprintf("2026-01-%02d", k+2), `"o-`, `"o-`+tag+"-", "hello", "hello "+tag, "snippet", "snippet "+tag)
	for i, f := range frames {
		frames[i] = []byte(r.Replace(string(f)))
	}
	return frames
}

// TestKeptMessagesStayIntact: the decoder reuses pooled scratch and interns
// strings, so it must never hand OnEvent a Message (nor leave in the
// StreamState a string) that a later decode can change. Workers stream
// different content at once, keep every Message they are handed, and at the
// end each kept Message must still equal what encoding/json decodes from its
// frame, and each state's transcript what a state fed by encoding/json holds.
func TestKeptMessagesStayIntact(t *testing.T) {
	const workers, rounds = 4, 30
	type kept struct {
		frames [][]byte
		msgs   []Message
		st     *StreamState
	}
	results := make([][]kept, workers)
	var wg sync.WaitGroup
	for k := 0; k < workers; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			frames := retainFrames(k)
			var stream bytes.Buffer
			for _, f := range frames {
				stream.WriteString("data: ")
				stream.Write(f)
				stream.WriteString("\n\n")
			}
			for r := 0; r < rounds; r++ {
				kp := kept{frames: frames, st: NewStreamState()}
				_, _ = readEvents(newSSEReader(bytes.NewReader(stream.Bytes()), 0, 0, nil), kp.st, func(e Event) {
					kp.msgs = append(kp.msgs, e.Message)
				}, nil)
				results[k] = append(results[k], kp)
			}
		}()
	}
	wg.Wait()
	// The frames exercise the lists the decoder builds in its scratch.
	var calls, lists, rets int
	for _, m := range results[0][0].msgs {
		switch m := m.(type) {
		case *ToolCallMessage:
			calls++
			if len(m.ToolCalls) > 1 {
				lists++
			}
		case *ToolReturnMessage:
			if len(m.ToolReturns) > 1 && len(m.Stdout) > 1 {
				rets++
			}
		}
	}
	if calls < 5 || lists < 1 || rets < 1 {
		t.Fatalf("frames decode to %d tool calls (%d with several), %d tool returns with lists: the fixtures changed", calls, lists, rets)
	}
	for k, runs := range results {
		for r, kp := range runs {
			if len(kp.msgs) != len(kp.frames) {
				t.Fatalf("worker %d round %d: %d events for %d frames", k, r, len(kp.msgs), len(kp.frames))
			}
			ref := NewStreamState()
			for i, f := range kp.frames {
				want, err := decodeStd(f)
				if err != nil {
					t.Fatalf("fixture %q: %v", f, err)
				}
				ref.Apply(want, false, timeZero)
				if p, ok := want.(*Ping); ok {
					p.ID, p.Date = "", "" // a stream leaves a ping's out
				}
				if !reflect.DeepEqual(kp.msgs[i], want) {
					t.Fatalf("worker %d round %d: kept message %d changed after it was handed on:\n got  %#v\n want %#v", k, r, i, kp.msgs[i], want)
				}
			}
			got, want := kp.st.Snapshot().Transcript.Steps, ref.Snapshot().Transcript.Steps
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("worker %d round %d: transcript changed:\n got  %+v\n want %+v", k, r, got, want)
			}
		}
	}
}

// TestInternedDecodeSharesRepeats: what the intern table is for — the run id
// and message type of two events are one string, not two allocations.
func TestInternedDecodeSharesRepeats(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts: the race detector's sync.Pool drops items at random")
	}
	a, err := DecodeMessage([]byte(fxReasoning))
	if err != nil {
		t.Fatal(err)
	}
	b, err := DecodeMessage([]byte(fxToolCall))
	if err != nil {
		t.Fatal(err)
	}
	if a.Base().RunID != b.Base().RunID || a.Base().ID != b.Base().ID {
		t.Fatalf("fixtures changed: %+v %+v", a.Base(), b.Base())
	}
	in := []byte(fxReasoning)
	allocs := testing.AllocsPerRun(50, func() {
		_, _ = DecodeMessage(in)
	})
	// The message itself, and nothing for its repeated strings (ids,
	// date, type, run id, source, the reasoning text seen before).
	if allocs > 1 {
		t.Fatalf("decoding a message seen before: %.1f allocs, want 1 (the Message)", allocs)
	}
}
