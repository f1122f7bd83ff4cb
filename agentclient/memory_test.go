package agentclient

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// hostileLetta generates hundreds of MiB on the fly (never held whole):
// one SSE event of 400 × 1 MiB data lines without a blank line, a 300 MiB
// GET /v1/runs/{id} body, and 100 × 1 MiB assistant deltas. It counts
// what it managed to write.
func hostileLetta(t testing.TB) (*httptest.Server, *atomic.Int64) {
	var written atomic.Int64
	mib := []byte(strings.Repeat("a", 1<<20))
	write := func(w io.Writer, parts ...[]byte) bool {
		for _, p := range parts {
			n, err := w.Write(p)
			written.Add(int64(n))
			if err != nil {
				return false
			}
		}
		return true
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/v1/runs/"):
			w.Header().Set("Content-Type", "application/json")
			if !write(w, []byte(`{"id":"run-1","status":"running","padding":"`)) {
				return
			}
			for i := 0; i < 300; i++ {
				if !write(w, mib) {
					return
				}
			}
			write(w, []byte(`"}`))
		case strings.Contains(r.URL.Path, "/agents/event/"):
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 400; i++ {
				if !write(w, []byte("data: "), mib, []byte("\n")) {
					return
				}
			}
			write(w, []byte("\n"))
		case strings.Contains(r.URL.Path, "/agents/deltas/"):
			w.Header().Set("Content-Type", "text/event-stream")
			for i := 0; i < 100; i++ {
				if !write(w, []byte(`data: {"message_type":"assistant_message","id":"m1","run_id":"run-1","content":"`),
					mib, []byte("\"}\n\n")) {
					return
				}
			}
			write(w, []byte(`data: {"message_type":"stop_reason","stop_reason":"end_turn"}`+"\n\n"))
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &written
}

// heapPeak samples the live heap while f runs and returns the highest
// HeapAlloc seen and the bytes allocated in all (TotalAlloc), both as
// growth over the heap after a GC before f.
func heapPeak(f func()) (peak, total uint64) {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var max uint64
	wg.Add(1)
	go func() {
		defer wg.Done()
		tk := time.NewTicker(time.Millisecond)
		defer tk.Stop()
		var m runtime.MemStats
		for {
			runtime.ReadMemStats(&m)
			if m.HeapAlloc > max {
				max = m.HeapAlloc
			}
			select {
			case <-stop:
				return
			case <-tk.C:
			}
		}
	}()
	f()
	close(stop)
	wg.Wait()
	var end runtime.MemStats
	runtime.ReadMemStats(&end)
	if max < end.HeapAlloc {
		max = end.HeapAlloc
	}
	if max > base.HeapAlloc {
		peak = max - base.HeapAlloc
	}
	return peak, end.TotalAlloc - base.TotalAlloc
}

// TestHostileLettaMemoryBounded: fed hundreds of MiB by a hostile server,
// the client holds no more than its limits (defaults: line 8 MiB, event 16
// MiB, response 8 MiB, transcript 8 MiB), and each call ends with the
// *ProtocolError naming the limit. The peak is sampled HeapAlloc, which
// counts garbage not yet collected: with GOGC=100 Go lets garbage reach the
// live heap's size, so the bound asserted is twice the limits that apply,
// plus 16 MiB of slack (the 300 MiB run body's peak swings between 16 and
// 23 MiB from run to run with the GC's timing; 8 MiB of slack failed it
// about one run in fifteen). Code without the limits, fed the same, grew
// by gigabytes.
func TestHostileLettaMemoryBounded(t *testing.T) {
	srv, written := hostileLetta(t)
	c, err := New(Config{BaseURL: srv.URL, RequestTimeout: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	lim := c.Limits()
	const slack = 16 << 20
	for _, tc := range []struct {
		name  string
		sent  int64 // what the server offers
		bound int   // the limit that applies
		want  error
		call  func() error
	}{
		{"event of 400 × 1 MiB lines", 400 << 20, lim.Event + lim.Line, ErrEventTooLong, func() error {
			return c.SendStream(context.Background(), SendRequest{AgentID: "event", Text: "hi", Otid: "o1"}, NewStreamState(), StreamOptions{})
		}},
		{"300 MiB run body", 300 << 20, lim.Response, ErrResponseTooLarge, func() error {
			_, err := c.GetRun(context.Background(), "run-1")
			return err
		}},
		{"100 × 1 MiB assistant deltas", 100 << 20, lim.Transcript + lim.Event, ErrTranscriptTooLarge, func() error {
			return c.SendStream(context.Background(), SendRequest{AgentID: "deltas", Text: "hi", Otid: "o2"}, NewStreamState(), StreamOptions{})
		}},
	} {
		written.Store(0)
		var err error
		peak, total := heapPeak(func() { err = tc.call() })
		var pe *ProtocolError
		if !errors.As(err, &pe) || !errors.Is(err, tc.want) {
			t.Fatalf("%s: err %v, want %v", tc.name, err, tc.want)
		}
		t.Logf("%s: server offered %d MiB, wrote %d MiB before the cut; heap peak +%.1f MiB (limits %d MiB; asserted ≤ 2×limits + %d MiB), allocated %.1f MiB in all; %v",
			tc.name, tc.sent>>20, written.Load()>>20, float64(peak)/(1<<20), tc.bound>>20, slack>>20, float64(total)/(1<<20), err)
		if peak > uint64(2*tc.bound+slack) {
			t.Errorf("%s: heap grew by %d MiB, past 2 × %d MiB of limits + %d MiB slack", tc.name, peak>>20, tc.bound>>20, slack>>20)
		}
	}
}
