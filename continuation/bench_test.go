package continuation_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// BenchmarkContinuationCost measures what following a lost turn costs the
// Letta server per poll, and what finding a turn by its otid costs, for an
// agent with a short and with a very long history (100,000 messages). Run:
//
//	go test -run '^$' -bench ContinuationCost -benchtime 5x ./continuation/
//
// The figures to compare are bytes/poll, requests/poll and lookup-bytes: the
// same within a few percent whatever the history length.
func BenchmarkContinuationCost(b *testing.B) {
	for _, history := range []int{100, 100_000} {
		b.Run(fmt.Sprintf("history=%d", history), func(b *testing.B) {
			sim := lettasim.NewServer(lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: 0.001})
			defer sim.Close()
			sc := lettasim.ToolScript(600*time.Second, "done", "web_search", "calculator")
			agent := sim.CreateAgent("bench", &sc)
			sim.SeedHistory(agent, history)
			c, _ := agentclient.New(agentclient.Config{BaseURL: sim.URL})
			bud := testBudget()
			bud.StallTimeout = 100 * time.Millisecond
			r, _ := continuation.New(continuation.Config{Client: c, Budget: bud})
			var polls, pollReq, pollBytes, lookups, lookupBytes int64
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				sim.SetFault(agent, lettasim.Fault{Status5xxAfterStore: 502}) // found by otid, then followed by polling
				sim.ResetRequests()
				tu := continuation.Turn{AgentID: agent, Otid: fmt.Sprintf("00000000-0000-4000-8000-%012d", i), Text: "go", Started: time.Now()}
				d := runTurn(context.Background(), r, tu, agentclient.NewStreamState(), continuation.Hooks{})
				if d.Outcome != continuation.Completed || sim.CountOtid(tu.Otid) != 1 {
					b.Fatalf("decision %+v", d)
				}
				st := sim.Requests()
				polls += int64(d.Polls)
				pollReq += st.Get(lettasim.EndpointGetRun).Requests + st.Get(lettasim.EndpointRunMessages).Requests
				pollBytes += st.Get(lettasim.EndpointGetRun).Bytes + st.Get(lettasim.EndpointRunMessages).Bytes
				lookups += int64(d.Lookups)
				lookupBytes += st.Get(lettasim.EndpointListMessages).Bytes
			}
			b.StopTimer()
			b.ReportMetric(float64(pollBytes)/float64(polls), "bytes/poll")
			b.ReportMetric(float64(pollReq)/float64(polls), "requests/poll")
			b.ReportMetric(float64(lookupBytes)/float64(lookups), "lookup-bytes")
			b.ReportMetric(0, "ns/op")
		})
	}
}
