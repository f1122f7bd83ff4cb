package lettasim

import (
	"bytes"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"
)

// discardStream is a ResponseWriter that keeps only the last bytes written: enough to tell a
// stream ended with [DONE], with none of net/http's costs.
type discardStream struct {
	h    http.Header
	tail []byte
	n    int
}

func (w *discardStream) Header() http.Header { return w.h }
func (w *discardStream) WriteHeader(int)     {}
func (w *discardStream) Flush()              {}
func (w *discardStream) Write(b []byte) (int, error) {
	w.n += len(b)
	w.tail = append(w.tail[:0], b...)
	return len(b), nil
}

// lettaqSendBody is what lettaq's agentclient sends for a text turn (encoding/json of its
// sendBody).
const lettaqSendBody = `{"messages":[{"type":"message","role":"user","content":"hi","otid":"7f1c2a54-3b1e-4c5d-9e8f-0a1b2c3d4e5f"}],"stream_tokens":false,"include_pings":true,"background":false}`

// BenchmarkInstantStreamTurn is the simulator's own CPU for one instant streaming turn (the
// bench's throughput workload) without the HTTP server: the handler, the run's goroutine and
// the frames. Compare builds with benchstat; the end-to-end figure is the bench's "simulator
// process CPU per instant turn".
func BenchmarkInstantStreamTurn(b *testing.B) {
	s := New(Config{AutoCreateAgents: true, DefaultScript: QuickScript("ok")})
	defer s.Close()
	body := []byte(lettaqSendBody)
	w := &discardStream{h: http.Header{}}
	b.ReportAllocs()
	for b.Loop() {
		req, err := http.NewRequest(http.MethodPost, "/v1/agents/agent-00000000-0000-4000-8000-000000000001/messages/stream",
			bytes.NewReader(body))
		if err != nil {
			b.Fatal(err)
		}
		w.h = http.Header{}
		s.ServeHTTP(w, req)
		if !bytes.Equal(w.tail, []byte("data: [DONE]\n\n")) {
			b.Fatalf("the stream ended with %q", w.tail)
		}
	}
}

// wantDate is what appendDate wrote before it formatted digits itself.
func wantDate(t time.Time) string { return `"` + t.UTC().Format(dateLayout) + `"` }

func TestAppendDateMatchesFormat(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	zones := []*time.Location{time.UTC, time.Local, time.FixedZone("east", 5*3600+1800), time.FixedZone("west", -11*3600)}
	times := []time.Time{
		time.Now(), // carries a monotonic reading
		{},
		time.Date(0, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(-1, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC),
		time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC),
		time.Date(1999, 12, 31, 23, 59, 59, 999, time.UTC),
		time.Date(2024, 2, 29, 12, 30, 45, 123456789, time.FixedZone("x", 3600)),
		time.Unix(1<<40, 0),
		time.Unix(-1<<40, 0),
	}
	for range 200_000 {
		sec := rng.Int64N(2*400*366*86400) - 400*366*86400 + time.Now().Unix() // within ±400 years of now
		if rng.IntN(10) == 0 {
			sec = rng.Int64N(1<<42) - 1<<41 // anywhere, years far out of 0..9999 too
		}
		times = append(times, time.Unix(sec, rng.Int64N(1e9)).In(zones[rng.IntN(len(zones))]))
	}
	for _, tm := range times {
		if got, want := string(appendDate([]byte("x"), tm)), "x"+wantDate(tm); got != want {
			t.Fatalf("appendDate(%v) = %s, want %s", tm, got, want)
		}
	}
}

func FuzzAppendDate(f *testing.F) {
	f.Add(int64(1735787045), int64(123456789))
	f.Add(int64(-62167219200), int64(0))
	f.Fuzz(func(t *testing.T, sec, nsec int64) {
		tm := time.Unix(sec, nsec)
		if got, want := string(appendDate(nil, tm)), wantDate(tm); got != want {
			t.Fatalf("appendDate(%v) = %s, want %s", tm, got, want)
		}
	})
}

func BenchmarkAppendDate(b *testing.B) {
	buf := make([]byte, 0, 64)
	now := time.Now()
	for b.Loop() {
		buf = appendDate(buf[:0], now)
	}
}
