//go:build unix

package lettasim_test

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// BenchmarkConcurrentThinkingTurns holds 10,000 streaming turns open at once (fewer if the
// file descriptor limit cannot hold two ends of that many loopback connections), each
// thinking for 2s with a ping every 500ms. Run it without -race:
//
//	go test -run '^$' -bench ConcurrentThinkingTurns -benchtime 1x ./integration/lettasim/
func BenchmarkConcurrentThinkingTurns(b *testing.B) {
	n := 10_000
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil {
		if max := int(lim.Cur/2) - 500; max < n {
			n = max
		}
	}
	if raceEnabled && n > 2000 {
		n = 2000 // the race detector's goroutine limit
	}
	b.ReportAllocs()
	for i := 0; i < b.N; i++ {
		srv := lettasim.NewServer(lettasim.Config{TimeScale: 1, PingInterval: benchPing})
		agent := srv.CreateAgent("bench", nil)
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		start := time.Now()
		results := runConcurrentTurns(b, srv, agent, n, "2s")
		elapsed := time.Since(start)
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		failed := 0
		for _, r := range results {
			if r.err != nil || len(r.data) < 14 || string(r.data[len(r.data)-14:]) != "data: [DONE]\n\n" {
				failed++
			}
		}
		stats := srv.Requests()
		srv.Close()
		if failed > 0 {
			b.Fatalf("%d of %d turns failed", failed, n)
		}
		b.ReportMetric(float64(n), "turns")
		b.ReportMetric(elapsed.Seconds(), "s/batch")
		b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(n), "allocB/turn")
		b.ReportMetric(float64(stats.Get(lettasim.EndpointStream).Bytes)/float64(n), "streamB/turn")
	}
}

// benchPing is the ping interval of the benchmark: 4 pings per 2s turn.
var benchPing = 500 * time.Millisecond
