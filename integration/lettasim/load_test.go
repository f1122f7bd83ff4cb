package lettasim_test

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

type rawTurn struct {
	otid string
	data []byte
	err  error
}

// runConcurrentTurns streams n turns at once, each thinking for think (scaled) while pings
// flow, and returns the raw streams.
func runConcurrentTurns(tb testing.TB, srv *lettasim.Server, agent string, n int, think string) []rawTurn {
	out := make([]rawTurn, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			otid := fmt.Sprintf("otid-load-%d", i)
			body := fmt.Sprintf(`{"messages":[{"role":"user","content":"[[sim think=%s]] turn %d","otid":%q}]}`, think, i, otid)
			resp, err := srv.Client().Post(srv.URL+"/v1/agents/"+agent+"/messages/stream", "application/json", strings.NewReader(body))
			if err != nil {
				out[i] = rawTurn{otid: otid, err: err}
				return
			}
			data, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			out[i] = rawTurn{otid: otid, data: data, err: err}
		}(i)
	}
	wg.Wait()
	return out
}

// Many turns at once, thinking with pings flowing: all complete, each stored exactly once.
// (500 under -race: the race detector allows ~8k goroutines; the benchmark below does 10k.)
func TestManyConcurrentTurns(t *testing.T) {
	n := 500
	if testing.Short() {
		n = 100
	}
	srv := newServer(t, lettasim.Config{PingInterval: 10 * time.Millisecond, Logf: func(string, ...any) {}})
	agent := srv.CreateAgent("load", nil)
	results := runConcurrentTurns(t, srv, agent, n, "100s") // 100ms each
	totalPings := 0
	for i, r := range results {
		if r.err != nil {
			t.Fatalf("turn %d: %v", i, r.err)
		}
		evs, err := newSSE(t, strings.NewReader(string(r.data))).all()
		if err != nil || len(evs) == 0 || evs[len(evs)-1].typ() != "[DONE]" {
			t.Fatalf("turn %d: %v %v", i, types(evs), err)
		}
		pings := 0
		for _, e := range evs {
			if e.typ() == "ping" {
				pings++
			}
		}
		if pings < 1 {
			t.Errorf("turn %d: no first ping", i)
		}
		totalPings += pings
		if c := srv.CountOtid(r.otid); c != 1 {
			t.Fatalf("turn %d stored %d times", i, c)
		}
	}
	// ~10 pings per turn (100ms at 10ms); a starved scheduler under -race may fire fewer.
	if avg := float64(totalPings) / float64(n); avg < 3 {
		t.Errorf("%.1f pings per turn while thinking 100ms with a 10ms interval", avg)
	}
	if got := len(srv.Runs(agent)); got != n {
		t.Fatalf("%d runs", got)
	}
}
