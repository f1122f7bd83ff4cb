package continuation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// scriptedRun serves a run (GET /v1/runs/{id}: status) whose messages are n
// assistant messages "m0".."m{n-1}", dated a millisecond apart, the way a
// misbehaving server lists them (GET /v1/runs/{id}/messages): ignoreAfter
// answers every page from the start; newestFirst lists each page in
// reverse although order=asc was asked. It counts the message requests.
type scriptedRun struct {
	n                        int
	status                   string
	ignoreAfter, newestFirst bool
	lists                    atomic.Int64
}

func (s *scriptedRun) runner(t *testing.T, b budget.Config) *Runner {
	t.Helper()
	t0 := time.Now().Add(-time.Minute)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/messages") {
			stop := `"end_turn"`
			if s.status == "running" {
				stop = "null"
			}
			fmt.Fprintf(w, `{"id":"run-1","status":%q,"stop_reason":%s,"background":false}`, s.status, stop)
			return
		}
		s.lists.Add(1)
		start := 0
		if a := r.URL.Query().Get("after"); a != "" && !s.ignoreAfter {
			start, _ = strconv.Atoi(strings.TrimPrefix(a, "m"))
			start++
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var out []map[string]any
		for i := start; i < s.n && len(out) < limit; i++ {
			out = append(out, map[string]any{"id": "m" + strconv.Itoa(i), "message_type": "assistant_message", "run_id": "run-1",
				"date": t0.Add(time.Duration(i) * time.Millisecond).UTC().Format(time.RFC3339Nano), "content": "part " + strconv.Itoa(i)})
		}
		if s.newestFirst {
			slices.Reverse(out)
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// answer is the answer of a run of n messages, in their order.
func (s *scriptedRun) answer() string {
	parts := make([]string, s.n)
	for i := range parts {
		parts[i] = "part " + strconv.Itoa(i)
	}
	return strings.Join(parts, "\n\n")
}

// shortFollow is the default budget with a follow window of window.
func shortFollow(window time.Duration) budget.Config {
	b := budget.Default()
	b.ContinuationMax = window
	b.RequestTimeout = time.Second
	b.StopGrace = time.Second
	return b
}

// A run's messages endpoint that ignores `after` answers every page from
// the start: the poll sees the cursor not move, reads the run in one page
// that holds it all instead of asking for the same page again and again,
// and backs off between polls. An ended run's answer is delivered whole;
// a run that goes on is polled a few times in its window, not thousands.
func TestPollOnAServerIgnoringAfter(t *testing.T) {
	t.Run("ended", func(t *testing.T) {
		s := &scriptedRun{n: 150, status: "completed", ignoreAfter: true}
		b := shortFollow(3 * time.Second)
		r := s.runner(t, b)
		st := agentclient.NewStreamState()
		d := r.follow(context.Background(), Turn{AgentID: "agent-1", Otid: "o"}, st, Hooks{}, Result{RunID: "run-1"})
		if d.Outcome != Completed || st.Answer() != s.answer() {
			t.Fatalf("%v (%s), answer %d of %d bytes, %d list requests: want the whole answer", d.Outcome, d.Reason,
				len(st.Answer()), len(s.answer()), s.lists.Load())
		}
		t.Logf("%d list requests", s.lists.Load())
		if n := s.lists.Load(); n > 5 {
			t.Errorf("%d list requests for a run of 150 messages, want a few", n)
		}
	})
	t.Run("running", func(t *testing.T) {
		s := &scriptedRun{n: 150, status: "running", ignoreAfter: true}
		b := shortFollow(3 * time.Second)
		r := s.runner(t, b)
		st := agentclient.NewStreamState()
		d := r.follow(context.Background(), Turn{AgentID: "agent-1", Otid: "o"}, st, Hooks{}, Result{RunID: "run-1"})
		if d.Outcome != StillRunning {
			t.Fatalf("%v (%s): want still running", d.Outcome, d.Reason)
		}
		// Polls 1 s doubling in a 3 s window: three or four, each one to
		// three pages.
		t.Logf("%d list requests in %v", s.lists.Load(), b.ContinuationMax)
		if n := s.lists.Load(); n > 12 {
			t.Errorf("%d list requests in a %v window, want a few (the poll backs off)", n, b.ContinuationMax)
		}
	})
}

// Run messages listed newest first although order=asc was asked come out
// in their own order (by date), not the list's.
func TestPollOrdersMessagesByTheirOwnPosition(t *testing.T) {
	for _, ignoreAfter := range []bool{false, true} {
		t.Run("ignoreAfter="+strconv.FormatBool(ignoreAfter), func(t *testing.T) {
			s := &scriptedRun{n: 150, status: "completed", newestFirst: true, ignoreAfter: ignoreAfter}
			r := s.runner(t, shortFollow(3*time.Second))
			st := agentclient.NewStreamState()
			d := r.follow(context.Background(), Turn{AgentID: "agent-1", Otid: "o"}, st, Hooks{}, Result{RunID: "run-1"})
			if d.Outcome != Completed || st.Answer() != s.answer() {
				a := st.Answer()
				t.Fatalf("%v (%s), answer starts %q: want the parts in order", d.Outcome, d.Reason, a[:min(len(a), 40)])
			}
		})
	}
}
