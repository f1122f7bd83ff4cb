package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"
)

// tokenChunk is an assistant token delta numbered seq.
func tokenChunk(seq int, text string) string {
	return data(fmt.Sprintf(`{"id":"message-1","message_type":"assistant_message","run_id":"run-1","seq_id":%d,"content":%q}`, seq, text))
}

// A resume checks that its chunks number on from starting_after+1: a stream
// that starts later (the server trimmed the chunks in between) ends at the
// gap, with a SeqGapError, and the chunk after the gap is not appended; a
// stream that numbers on ends normally.
func TestResumeStopsAtSeqGap(t *testing.T) {
	leakCheck(t)
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		rs := newRaw(t,
			func(w http.ResponseWriter, r *http.Request) { // trimmed: 3..6 are gone
				startSSE(w)
				sse(w, data(`{"message_type":"ping","id":"ping-1","run_id":"run-1","seq_id":9}`), tokenChunk(7, " seven"),
					tokenChunk(8, " eight"), data(`{"message_type":"stop_reason","stop_reason":"end_turn","seq_id":9}`), data("[DONE]"))
			},
			func(w http.ResponseWriter, r *http.Request) { // whole
				startSSE(w)
				sse(w, tokenChunk(3, " three"), tokenChunk(4, " four"),
					data(`{"message_type":"stop_reason","stop_reason":"end_turn","seq_id":5}`), data("[DONE]"))
			})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		st.Apply(mustDecode(t, `{"id":"message-1","message_type":"assistant_message","run_id":"run-1","seq_id":1,"content":"one"}`), false, time.Now())
		st.Apply(mustDecode(t, `{"id":"message-1","message_type":"assistant_message","run_id":"run-1","seq_id":2,"content":" two"}`), false, time.Now())
		err := c.ResumeStream(context.Background(), ResumeRequest{RunID: "run-1", StartingAfter: 2}, st, StreamOptions{})
		var g *SeqGapError
		if !errors.As(err, &g) || g.Want != 3 || g.Got != 7 || !IsSeqGap(err) {
			t.Fatalf("err %v: want a seq gap (3 due, 7 came)", err)
		}
		if st.Answer() != "one two" || st.StopReason() != "" {
			t.Errorf("answer %q stop %q: the chunks after the gap were applied", st.Answer(), st.StopReason())
		}
		if err := c.ResumeStream(context.Background(), ResumeRequest{RunID: "run-1", StartingAfter: 2}, st, StreamOptions{}); err != nil {
			t.Fatalf("a resume that numbers on: %v", err)
		}
		if st.Answer() != "one two three four" {
			t.Errorf("answer %q", st.Answer())
		}
	})
}

// A resume whose server ignores starting_after replays the run's stream from
// its start: the chunks the state applied already (seq_id up to
// starting_after) are dropped, not appended a second time.
func TestResumeDropsReplayedChunks(t *testing.T) {
	leakCheck(t)
	eachTransport(t, func(t *testing.T, tr StreamTransport) {
		rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) { // from the start, whatever was asked
			startSSE(w)
			sse(w, data(`{"message_type":"ping","id":"ping-1","run_id":"run-1","seq_id":0}`), tokenChunk(1, "Hello"),
				tokenChunk(2, " wor"), tokenChunk(3, "ld!"), data(`{"message_type":"stop_reason","stop_reason":"end_turn","seq_id":4}`),
				data("[DONE]"))
		})
		c := newClient(t, tr, rs.URL, Clocks{})
		st := NewStreamState()
		st.Apply(mustDecode(t, `{"id":"message-1","message_type":"assistant_message","run_id":"run-1","seq_id":1,"content":"Hello"}`), false, time.Now())
		st.Apply(mustDecode(t, `{"id":"message-1","message_type":"assistant_message","run_id":"run-1","seq_id":2,"content":" wor"}`), false, time.Now())
		var events int
		err := c.ResumeStream(context.Background(), ResumeRequest{RunID: "run-1", StartingAfter: 2}, st,
			StreamOptions{OnEvent: func(ev Event) {
				if ev.Message != nil && ev.Message.Base().MessageType == TypeAssistant {
					events++
				}
			}})
		if err != nil {
			t.Fatalf("resume: %v", err)
		}
		if st.Answer() != "Hello world!" || st.StopReason() != "end_turn" {
			t.Errorf("answer %q stop %q: want %q, the replayed chunks dropped", st.Answer(), st.StopReason(), "Hello world!")
		}
		if events != 1 {
			t.Errorf("%d assistant events handed on, want 1 (the replayed ones are not new)", events)
		}
	})
}
