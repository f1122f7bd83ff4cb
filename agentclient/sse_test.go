package agentclient

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func readFrames(t *testing.T, r io.Reader, max int) ([]sseFrame, error) {
	t.Helper()
	rd := newSSEReader(r, max, 0, nil)
	var out []sseFrame
	for {
		f, err := rd.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		out = append(out, sseFrame{Event: f.Event, Data: append([]byte(nil), f.Data...)})
	}
}

func TestSSEFraming(t *testing.T) {
	cases := []struct {
		name string
		in   string
		want []sseFrame
	}{
		{"letta data frames", "data: {\"a\":1}\n\ndata: [DONE]\n\n",
			[]sseFrame{{Data: []byte(`{"a":1}`)}, {Data: []byte("[DONE]")}}},
		{"crlf endings", "data: x\r\n\r\nevent: error\r\ndata: {\"e\":1}\r\n\r\n",
			[]sseFrame{{Data: []byte("x")}, {Event: "error", Data: []byte(`{"e":1}`)}}},
		{"event error then data", "event: error\ndata: {\"error\":\"boom\",\"code\":\"INTERNAL_SERVER_ERROR\"}\n\n",
			[]sseFrame{{Event: "error", Data: []byte(`{"error":"boom","code":"INTERNAL_SERVER_ERROR"}`)}}},
		{"event name does not leak to next frame", "event: cancelled\ndata: {}\n\ndata: y\n\n",
			[]sseFrame{{Event: "cancelled", Data: []byte("{}")}, {Data: []byte("y")}}},
		{"comments, id and retry ignored", ": hi\nid: 7\nretry: 10\ndata: z\n\n",
			[]sseFrame{{Data: []byte("z")}}},
		{"multi data lines joined", "data: a\ndata: b\n\n", []sseFrame{{Data: []byte("a\nb")}}},
		{"no space after colon", "data:q\n\n", []sseFrame{{Data: []byte("q")}}},
		{"blank lines between frames", "\n\ndata: 1\n\n\n\ndata: 2\n\n", []sseFrame{{Data: []byte("1")}, {Data: []byte("2")}}},
		{"partial frame at EOF is dropped", "data: 1\n\ndata: {\"half", []sseFrame{{Data: []byte("1")}}},
		{"unterminated frame at EOF is dropped", "data: 1\n\ndata: 2\n", []sseFrame{{Data: []byte("1")}}},
	}
	for _, tc := range cases {
		for _, oneByte := range []bool{false, true} {
			name := tc.name
			if oneByte {
				name += "/one byte at a time"
			}
			t.Run(name, func(t *testing.T) {
				var r io.Reader = strings.NewReader(tc.in)
				if oneByte {
					r = iotest.OneByteReader(r)
				}
				got, err := readFrames(t, r, 0)
				if err != nil {
					t.Fatal(err)
				}
				if len(got) != len(tc.want) {
					t.Fatalf("got %d frames %q, want %d", len(got), got, len(tc.want))
				}
				for i := range got {
					if got[i].Event != tc.want[i].Event || string(got[i].Data) != string(tc.want[i].Data) {
						t.Errorf("frame %d = {%q %q}, want {%q %q}", i, got[i].Event, got[i].Data, tc.want[i].Event, tc.want[i].Data)
					}
				}
			})
		}
	}
}

func TestSSELongLines(t *testing.T) {
	big := strings.Repeat("x", 200<<10) // longer than the bufio buffer
	got, err := readFrames(t, iotest.HalfReader(strings.NewReader("data: "+big+"\n\n")), 1<<20)
	if err != nil || len(got) != 1 || len(got[0].Data) != len(big) {
		t.Fatalf("long line: err=%v frames=%d", err, len(got))
	}
	_, err = readFrames(t, strings.NewReader("data: "+big+"\n\n"), 100<<10)
	if !errors.Is(err, ErrLineTooLong) {
		t.Fatalf("over the limit: err = %v, want ErrLineTooLong", err)
	}
	if !strings.Contains(err.Error(), "limit") {
		t.Errorf("error should name the limit: %v", err)
	}
}

func TestSSECountsEveryByte(t *testing.T) {
	in := "data: {\"message_type\":\"ping\"}\n\ndata: [DONE]\n\n"
	n := 0
	rd := newSSEReader(iotest.OneByteReader(strings.NewReader(in)), 0, 0, func(k int) { n += k })
	for {
		if _, err := rd.Next(); err != nil {
			break
		}
	}
	if n != len(in) {
		t.Fatalf("onBytes saw %d bytes, want %d", n, len(in))
	}
}

// A large event does not pin its buffers for the rest of the stream.
func TestSSEReleasesLargeScratch(t *testing.T) {
	big := strings.Repeat("x", 100<<10)
	rd := newSSEReader(strings.NewReader("data: "+big+"\n\ndata: small\n\n"), 0, 0, nil)
	if fr, err := rd.Next(); err != nil || len(fr.Data) != len(big) {
		t.Fatalf("big event: %v", err)
	}
	if fr, err := rd.Next(); err != nil || string(fr.Data) != "small" {
		t.Fatalf("small event: %q %v", fr.Data, err)
	}
	// The reader lets go before it waits for more bytes (here it meets EOF).
	if _, err := rd.Next(); !errors.Is(err, io.EOF) {
		t.Fatalf("after the events: %v", err)
	}
	if cap(rd.buf) > scratchKeep || cap(rd.data) > scratchKeep {
		t.Fatalf("buffers kept after a large event: buffer %d, data %d bytes", cap(rd.buf), cap(rd.data))
	}
}
