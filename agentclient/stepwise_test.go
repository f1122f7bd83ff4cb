//go:build unix

package agentclient

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"
)

// stepServer answers one request per connection with resp, written piece
// by piece: the first piece at once, each next one when the test sends on
// next. It closes the connection after the last piece, or when the test
// ends.
func stepServer(t *testing.T, resp []string) (url string, next chan<- struct{}) {
	t.Helper()
	ch := make(chan struct{})
	return serveRaw(t, func(c net.Conn, done <-chan struct{}) {
		for i, p := range resp {
			if i > 0 {
				select {
				case <-ch:
				case <-done:
					return
				}
			}
			if _, err := c.Write([]byte(p)); err != nil {
				return
			}
		}
		<-done
	}), ch
}

// cutEvery cuts s every n bytes.
func cutEvery(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}

// seenEvent is what a test compares of an Event (Message pointers differ
// between reads).
type seenEvent struct {
	Type     string
	Update   Update
	SSEEvent string
	Done     bool
	Err      string
}

func see(e Event) seenEvent {
	s := seenEvent{Update: e.Update, SSEEvent: e.SSEEvent, Done: e.Done}
	if e.Message != nil {
		s.Type = string(e.Message.Base().MessageType)
	}
	if e.DecodeErr != nil {
		s.Err = e.DecodeErr.Error()
	}
	return s
}

// A pending stream reads what a stream that waits under the call reads,
// however its bytes are cut: in a chunk-size line, in a CRLF, between an
// event's name and its data, in a data line. Each piece is sent only once
// the stream returned early, so it returns early between every two.
func TestPendingStreamReadsWhatAWaitingStreamReads(t *testing.T) {
	leakCheck(t)
	body := ": comment\r\n" + data(fxPing) + "event: message\n" + data(fxReasoning) + data(fxToolCall) +
		"data: not json\n\n" + data(fxAssistant) + data(fxStop) + data(fxUsage) + data("[DONE]")
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + chunkBody(body, 53, "")

	// The reference: every byte at once, read by a stream that waits.
	url, _ := stepServer(t, []string{resp})
	c := newClient(t, StreamDedicated, url, Clocks{})
	want := NewStreamState()
	var wantEvents []seenEvent
	if err := c.SendStream(context.Background(), sendReq(), want, StreamOptions{OnEvent: func(e Event) { wantEvents = append(wantEvents, see(e)) }}); err != nil {
		t.Fatal(err)
	}

	for _, n := range []int{1, 7, 100} {
		t.Run(fmt.Sprintf("pieces of %d bytes", n), func(t *testing.T) {
			head := strings.Index(resp, "\r\n\r\n") + 4
			parts := append([]string{resp[:head]}, cutEvery(resp[head:], n)...)
			url, next := stepServer(t, parts)
			c := newClient(t, StreamDedicated, url, Clocks{})
			st := NewStreamState()
			var got []seenEvent
			ctx := context.Background()
			err := c.SendStream(ctx, sendReq(), st, StreamOptions{Stepwise: true, OnEvent: func(e Event) { got = append(got, see(e)) }})
			parks, sent := 0, 1
			for err == nil && st.Pending() {
				parks++
				if sent < len(parts) {
					next <- struct{}{}
					sent++
				}
				st.Wait()
				err = c.ReadPending(ctx, st)
			}
			if err != nil {
				t.Fatalf("pending stream ended with %v", err)
			}
			if st.Pending() {
				t.Error("the state still holds a pending stream after the stream ended")
			}
			// The stream ends at [DONE]: it needed every piece up to the
			// one that completes it, and returned early before each.
			need := len(parts)
			for end := len(resp) - len("0\r\n\r\n\r\n"); need > 1 && len(strings.Join(parts[:need-1], "")) >= end; need-- {
			}
			if sent != need || parks != need-1 {
				t.Errorf("returned early %d times and was sent %d pieces, want %d pieces, returning early before each", parks, sent, need)
			}
			if !reflect.DeepEqual(got, wantEvents) {
				t.Errorf("events differ from a waiting stream's:\n got %+v\nwant %+v", got, wantEvents)
			}
			g, w := st.Snapshot(), want.Snapshot()
			if g.RunID != w.RunID || g.Answer != w.Answer || g.StopReason != w.StopReason || g.Pings != w.Pings ||
				g.Events != w.Events || !g.Done || !reflect.DeepEqual(g.Transcript.Steps, w.Transcript.Steps) {
				t.Errorf("state differs from a waiting stream's:\n got %+v\nwant %+v", g, w)
			}
		})
	}
}

// A pending stream is still ended by its clocks and by the caller's
// context: the wait returns, and ReadPending says which.
func TestPendingStreamEndsByClockOrCancel(t *testing.T) {
	leakCheck(t)
	resp := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(data(fxPing)), data(fxPing))
	clocks := Clocks{Connect: time.Second, Stall: 150 * time.Millisecond, Total: 10 * time.Second, ContentIdle: -1}

	t.Run("stall", func(t *testing.T) {
		url, _ := stepServer(t, []string{resp, "never sent"})
		c := newClient(t, StreamDedicated, url, clocks)
		st := NewStreamState()
		ctx := context.Background()
		if err := c.SendStream(ctx, sendReq(), st, StreamOptions{Stepwise: true}); err != nil || !st.Pending() {
			t.Fatalf("SendStream = %v, pending %v: want it pending", err, st.Pending())
		}
		st.Wait() // returns when the stall clock closes the connection
		err := c.ReadPending(ctx, st)
		var se *StreamError
		if !errors.As(err, &se) || se.Clock != ClockStall || se.State.RunID != "run-11111111-aaaa" {
			t.Fatalf("ReadPending = %v, want the stall clock's StreamError with the run id", err)
		}
		if st.Pending() {
			t.Error("still pending after the stream ended")
		}
	})
	t.Run("cancel", func(t *testing.T) {
		url, _ := stepServer(t, []string{resp, "never sent"})
		c := newClient(t, StreamDedicated, url, Clocks{Connect: time.Second, Stall: 10 * time.Second, Total: 10 * time.Second, ContentIdle: -1})
		st := NewStreamState()
		ctx, cancel := context.WithCancel(context.Background())
		if err := c.SendStream(ctx, sendReq(), st, StreamOptions{Stepwise: true}); err != nil || !st.Pending() {
			t.Fatalf("SendStream = %v, pending %v: want it pending", err, st.Pending())
		}
		time.AfterFunc(50*time.Millisecond, cancel)
		st.Wait()
		err := c.ReadPending(ctx, st)
		var se *StreamError
		if !errors.As(err, &se) || se.Clock != ClockCanceled {
			t.Fatalf("ReadPending = %v, want a StreamError of the cancelled context", err)
		}
	})
	t.Run("nothing pending", func(t *testing.T) {
		c := newClient(t, StreamDedicated, "http://127.0.0.1:1", clocks)
		st := NewStreamState()
		st.Wait() // returns at once
		if err := c.ReadPending(context.Background(), st); err == nil || !strings.Contains(err.Error(), "no stream is pending") {
			t.Fatalf("ReadPending without a pending stream = %v", err)
		}
	})
}

// Streams through net/http do not park: Stepwise is a request, and they wait
// under the call as before.
func TestNetHTTPStreamsDoNotReturnEarly(t *testing.T) {
	leakCheck(t)
	release := releaseOnCleanup(t)
	rs := newRaw(t, func(w http.ResponseWriter, r *http.Request) {
		startSSE(w)
		sse(w, data(fxPing))
		select {
		case <-release:
		case <-time.After(100 * time.Millisecond):
		}
		sse(w, data(fxAssistant), data(fxStop), data("[DONE]"))
	})
	c := newClient(t, StreamNetHTTP, rs.URL, Clocks{})
	st := NewStreamState()
	if err := c.SendStream(context.Background(), sendReq(), st, StreamOptions{Stepwise: true}); err != nil {
		t.Fatalf("SendStream = %v, want the stream read to its end", err)
	}
	if st.Snapshot().Answer != "Here you go" {
		t.Errorf("answer = %q", st.Snapshot().Answer)
	}
}

// Wait called twice before ReadPending loses nothing: the second wait
// returns at once, the bytes the first read are read, and the turn's
// answer is whole, as net/http's (which does not park) reads it.
func TestWaitTwiceKeepsData(t *testing.T) {
	leakCheck(t)
	head := "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
	parts := []string{head + chunkBody(data(fxPing), 1<<10, "")[:len(chunkBody(data(fxPing), 1<<10, ""))-5],
		chunkBody(data(fxAssistant), 1<<10, "")[:len(chunkBody(data(fxAssistant), 1<<10, ""))-5],
		chunkBody(data(fxStop)+data("[DONE]"), 1<<10, "")}
	url, next := stepServer(t, parts)
	c := newClient(t, StreamDedicated, url, Clocks{})
	st := NewStreamState()
	ctx := context.Background()
	err := c.SendStream(ctx, sendReq(), st, StreamOptions{Stepwise: true})
	sent := 1
	send := func() {
		if sent < len(parts) {
			next <- struct{}{}
			sent++
		}
	}
	for err == nil && st.Pending() {
		send()
		st.Wait()
		send()
		st.Wait() // a second wait must not read over what the first read
		err = c.ReadPending(ctx, st)
	}
	if err != nil {
		t.Fatalf("pending stream ended with %v", err)
	}
	if s := st.Snapshot(); s.Answer != "Here you go" || s.StopReason != "end_turn" {
		t.Errorf("answer %q, stop reason %q: want the whole turn", s.Answer, s.StopReason)
	}
}
