package continuation_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// A resume from a seq_id older than the oldest chunk the server still keeps
// (Letta keeps ~10,000 per run; the simulator here 10) starts at the
// oldest kept chunk. The client notices the gap in seq_id and reads the
// run's messages instead: the whole answer arrives, no word missing.
func TestResumeFromTrimmedStreamGetsTheWholeAnswer(t *testing.T) {
	words := make([]string, 60)
	for i := range words {
		words[i] = "w" + string(rune('a'+i%26)) + string(rune('a'+i/26))
	}
	answer := strings.Join(words, " ")
	sim := lettasim.NewServer(lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: 0.001, MaxStreamChunks: 10})
	t.Cleanup(sim.Close)
	sc := &lettasim.Script{Tokens: true, TokenDelay: 2 * time.Second, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Counting."},
		{Kind: lettasim.Assistant, Text: answer},
	}}
	agent := sim.CreateAgent("trim", sc)
	c, err := agentclient.New(agentclient.Config{BaseURL: sim.URL, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := testBudget()
	b.Background, b.Resume = true, true
	r, err := continuation.New(continuation.Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	e := &env{sim: sim, client: c, runner: r, agent: agent, b: b}
	// Cut after a few chunks, and resume only once the run has ended (and its
	// stream was trimmed to its last ~10 chunks).
	e.proxied(t, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/runs/"); ok && r.Method == http.MethodPost {
			if err := sim.WaitRunDone(r.Context(), strings.TrimSuffix(id, "/stream")); err != nil {
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	sim.SetFault(agent, lettasim.Fault{DisconnectAfter: 4})
	st := agentclient.NewStreamState()
	tu := e.turn("count")
	d := e.run(t, tu, st, 1)
	if ri, ok := sim.Run(d.RunID); !ok || ri.Chunks < 40 {
		t.Fatalf("run %+v: want a long stream (it was trimmed to ~10 chunks)", ri)
	}
	if d.Outcome != continuation.Completed {
		t.Fatalf("decision %v (%s)", d.Outcome, d.Reason)
	}
	if got := st.Answer(); got != answer {
		t.Fatalf("answer has %d of %d words (resumes %d, polls %d):\n got %q\nwant %q", len(strings.Fields(got)), len(words), d.Resumes, d.Polls, got, answer)
	}
	if d.Resumes != 1 {
		t.Errorf("resumes %d, want 1 (the trimmed resume)", d.Resumes)
	}
}
