package agentclient

import (
	"context"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// pingStream is a loopback Letta that answers one stream request with an
// event-stream head, then writes one ping (a chunk of its own, with an id and
// date of its own, as Letta and lettasim send them) each time it is told to,
// and the run's end when told to stop. The frames are built before the
// stream starts, so the server allocates nothing while the client reads: what
// a measurement sees is the client's read path.
type pingStream struct {
	ln     net.Listener
	next   chan struct{} // one ping per receive
	stop   chan struct{} // closed: stop_reason, [DONE], last chunk
	done   chan struct{}
	frames [][]byte
	end    []byte
}

// pingFrames is how many distinct pings the server cycles through: more
// than the decoder's intern table holds, so that every ping's id and date
// are new to it, as they are on a real stream.
const pingFrames = 1024

func chunk(ev string) []byte {
	return []byte(strconv.FormatInt(int64(len(ev)), 16) + "\r\n" + ev + "\r\n")
}

func newPingStream(tb testing.TB, runID string) *pingStream {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	s := &pingStream{ln: ln, next: make(chan struct{}), stop: make(chan struct{}), done: make(chan struct{})}
	base := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range pingFrames {
		s.frames = append(s.frames, chunk(data(fmt.Sprintf(
			`{"message_type":"ping","id":"ping-%08x-4b1a-9e5f-%012d","date":"%s","run_id":"%s","seq_id":null}`,
			i, i, base.Add(time.Duration(i)*time.Second).Format("2006-01-02T15:04:05.000000+00:00"), runID))))
	}
	s.end = append(chunk(data(`{"message_type":"stop_reason","stop_reason":"end_turn"}`)+data("[DONE]")), "0\r\n\r\n"...)
	go func() {
		defer close(s.done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4<<10)
		_, _ = c.Read(buf) // the request
		_, _ = io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n")
		for i := 0; ; i++ {
			select {
			case <-s.next:
				if _, err := c.Write(s.frames[i%pingFrames]); err != nil {
					return
				}
			case <-s.stop:
				_, _ = c.Write(s.end)
				_, _ = c.Read(buf) // until the client closes
				return
			}
		}
	}()
	return s
}

func (s *pingStream) close() {
	_ = s.ln.Close()
	<-s.done
}

// pingReader runs one dedicated stream against a pingStream: ping writes
// one ping and returns once the stream's OnEvent has seen it. Close ends
// the run and waits for SendStream's result.
type pingReader struct {
	srv    *pingStream
	seen   chan struct{}
	result chan error
	st     *StreamState
}

func startPingReader(tb testing.TB, onEvent func(Event)) *pingReader {
	const run = "run-5f0c2a8e-1b7d-4c55-9a3e-2f4b7c9d1e60"
	srv := newPingStream(tb, run)
	c, err := New(Config{BaseURL: "http://" + srv.ln.Addr().String(), Clocks: Clocks{ContentIdle: -1}})
	if err != nil {
		tb.Fatal(err)
	}
	if c.sc == nil {
		tb.Fatal("the stream does not use a dedicated connection")
	}
	r := &pingReader{srv: srv, seen: make(chan struct{}), result: make(chan error, 1), st: NewStreamState()}
	opt := StreamOptions{OnEvent: func(ev Event) {
		if onEvent != nil {
			onEvent(ev)
		}
		if _, ok := ev.Message.(*Ping); ok {
			r.seen <- struct{}{}
		}
	}}
	go func() { r.result <- c.SendStream(context.Background(), sendReq(), r.st, opt) }()
	r.ping() // the stream is open, its reader past its first event
	return r
}

func (r *pingReader) ping() {
	r.srv.next <- struct{}{}
	<-r.seen
}

func (r *pingReader) close(tb testing.TB) {
	close(r.srv.stop)
	if err := <-r.result; err != nil {
		tb.Errorf("SendStream: %v", err)
	}
	r.srv.close()
}

// BenchmarkPing measures what one ping costs a thinking turn's dedicated
// stream: the wait on the connection, the read into a pooled buffer, the
// chunked framing, the SSE frame, the decode, the state, OnEvent (allocs/op
// and B/op are per ping). Every ping is read on its own (the server writes
// the next only once the client has seen the last), as while an agent
// thinks.
func BenchmarkPing(b *testing.B) {
	r := startPingReader(b, nil)
	for range 8 {
		r.ping()
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r.ping()
	}
	b.StopTimer()
	r.close(b)
	if got := r.st.Snapshot().Pings; got < b.N {
		b.Fatalf("state counted %d pings, want at least %d", got, b.N)
	}
}

// TestPingAllocatesNothing pins what a thinking turn's stream costs per
// ping: nothing on the heap, from the wait on the connection to OnEvent.
// (Without the race detector, whose sync.Pool drops buffers at random.)
func TestPingAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	r := startPingReader(t, nil)
	defer r.close(t)
	for range 8 {
		r.ping()
	}
	// A GC in the middle empties the buffer pool, and the next read
	// takes a new buffer: the bound leaves room for that, not for more.
	if n := testing.AllocsPerRun(500, r.ping); n > 0.05 {
		t.Errorf("a ping allocates %.2f times; want none", n)
	}
}

// TestStreamPingsRepeat: a stream hands on one *Ping for the pings that
// repeat it (run id and seq id), a new one when they change, and none of
// them carries the keep-alive's id or date; the state learns the run id
// and seq id from them as before.
func TestStreamPingsRepeat(t *testing.T) {
	frames := []string{
		`{"message_type":"ping","id":"ping-1","date":"2026-01-01T00:00:00+00:00","run_id":"run-1","seq_id":null}`,
		`{"message_type":"ping","id":"ping-2","date":"2026-01-01T00:00:01+00:00","run_id":"run-1","seq_id":null}`,
		`{"message_type":"ping","id":"ping-3","date":"2026-01-01T00:00:02+00:00","run_id":"run-1","seq_id":4}`,
		`{"message_type":"ping","id":"ping-4","date":"2026-01-01T00:00:03+00:00","run_id":"run-1","seq_id":4}`,
		`{"id":"message-1","date":"2026-01-01T00:00:04+00:00","message_type":"reasoning_message","run_id":"run-1","seq_id":5,"reasoning":"hm"}`,
		`{"message_type":"ping","id":"ping-5","date":"2026-01-01T00:00:05+00:00","run_id":"run-1","seq_id":5}`,
		`{"message_type":"stop_reason","stop_reason":"end_turn","run_id":"run-1","seq_id":6}`,
	}
	var in strings.Builder
	for _, f := range frames {
		in.WriteString(data(f))
	}
	var got []Message
	st := NewStreamState()
	rd := newSSEReader(strings.NewReader(in.String()), 0, 0, nil)
	if res, err := readEvents(rd, st, func(ev Event) { got = append(got, ev.Message) }, nil); res != nil || err != nil {
		t.Fatal(res, err)
	}
	if len(got) != len(frames) {
		t.Fatalf("%d events, want %d", len(got), len(frames))
	}
	pings := []*Ping{got[0].(*Ping), got[1].(*Ping), got[2].(*Ping), got[3].(*Ping), got[5].(*Ping)}
	if pings[0] != pings[1] || pings[2] != pings[3] {
		t.Error("a ping that repeats the last is not the last")
	}
	if pings[1] == pings[2] || pings[3] == pings[4] {
		t.Error("a ping with a new seq id is the last one")
	}
	for i, p := range pings {
		if p.ID != "" || p.Date != "" || p.RunID != "run-1" || p.MessageType != TypePing {
			t.Errorf("ping %d: %+v", i, p.Common)
		}
	}
	if *pings[2].SeqID != 4 || *pings[4].SeqID != 5 || pings[0].SeqID != nil {
		t.Errorf("seq ids: %v %v %v", pings[0].SeqID, *pings[2].SeqID, *pings[4].SeqID)
	}
	if r := got[4].(*ReasoningMessage); r.ID != "message-1" || r.Date != "2026-01-01T00:00:04+00:00" || *r.SeqID != 5 {
		t.Errorf("message after pings: %+v", r.Common)
	}
	snap := st.Snapshot()
	if snap.Pings != 5 || snap.RunID != "run-1" || snap.LastSeq != 6 || !snap.HasSeq {
		t.Errorf("state: pings %d run %q seq %d/%v", snap.Pings, snap.RunID, snap.LastSeq, snap.HasSeq)
	}
}

// TestRepeatedPingAllocatesNothing: a ping that repeats the stream's last
// decodes without allocating even when the pooled decoder has never seen
// its run id (a worker's thousands of streams share a few decoders, whose
// intern tables cannot hold all their run ids).
func TestRepeatedPingAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts are not meaningful under the race detector")
	}
	frame := []byte(`{"message_type":"ping","id":"ping-77","date":"2026-01-01T00:00:00+00:00","run_id":"run-5f0c2a8e-1b7d-4c55-9a3e-2f4b7c9d1e60","seq_id":12}`)
	m, err := decodeStreamMessage(frame, nil)
	if err != nil {
		t.Fatal(err)
	}
	last := m.(*Ping)
	n := testing.AllocsPerRun(100, func() {
		s := getScan()
		s.tab = internTable{} // forget every string
		s.release()
		if m, err := decodeStreamMessage(frame, last); err != nil || m != last {
			t.Fatalf("got %v %v, want the last ping", m, err)
		}
	})
	if n > 0 {
		t.Errorf("a repeated ping allocates %.1f times, want none", n)
	}
}
