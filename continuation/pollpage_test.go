package continuation

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// pagedRun serves an ended run (GET /v1/runs/{id}) whose messages are n
// assistant messages (GET /v1/runs/{id}/messages, after= and limit=), the
// last one "the end". onPage runs after each page is written.
func pagedRun(t *testing.T, n int, onPage func()) *agentclient.Client {
	t.Helper()
	var mu sync.Mutex
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/messages") {
			fmt.Fprint(w, `{"id":"run-1","status":"completed","stop_reason":"end_turn","background":false}`)
			return
		}
		start := 0
		if a := r.URL.Query().Get("after"); a != "" {
			start, _ = strconv.Atoi(strings.TrimPrefix(a, "message-"))
			start++
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var out []map[string]any
		for i := start; i < n && len(out) < limit; i++ {
			text := "part " + strconv.Itoa(i) + " "
			if i == n-1 {
				text = "the end"
			}
			out = append(out, map[string]any{"id": "message-" + strconv.Itoa(i), "date": time.Now().Format(time.RFC3339Nano),
				"message_type": "assistant_message", "run_id": "run-1", "content": text})
		}
		_ = json.NewEncoder(w).Encode(out)
		if onPage != nil {
			onPage()
		}
	}))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A follow whose window closes after a full page of an ended run's
// messages has not read them all: StillRunning, not an answer made of the
// first page. pollMessages says so with an error instead of stopping
// without one.
func TestPollStopsAtFullPageSaysIncomplete(t *testing.T) {
	var now time.Time
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	now = time.Now()
	c := pagedRun(t, 150, func() { mu.Lock(); now = now.Add(time.Hour); mu.Unlock() }) // the window closes with the first page
	b := budget.Default()
	r, err := New(Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	loop := b.FollowLoop(clock())
	loop.Now = clock
	st := agentclient.NewStreamState()
	_, _, perr := r.pollMessages(context.Background(), loop, st, Hooks{}, "run-1", "")
	if perr == nil {
		t.Errorf("pollMessages stopped after a full page with the window closed and said nothing")
	}

	mu.Lock()
	now = time.Now()
	mu.Unlock()
	loop = b.FollowLoop(clock())
	loop.Now = clock
	st = agentclient.NewStreamState()
	d := r.followWithin(context.Background(), Turn{AgentID: "agent-1", Otid: "o"}, st, Hooks{}, Result{RunID: "run-1"}, loop)
	if d.Outcome != StillRunning {
		t.Fatalf("decision %v reason %q, answer %d bytes: want still_running (50 messages unread)", d.Outcome, d.Reason, len(st.Answer()))
	}
}

// bigRun serves an ended run whose n messages are each size bytes of
// answer: a page of many passes the client's MaxResponseBytes, one does not.
func bigRun(t *testing.T, n, size int) (*agentclient.Client, string) {
	t.Helper()
	var want strings.Builder
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if !strings.HasSuffix(r.URL.Path, "/messages") {
			fmt.Fprint(w, `{"id":"run-1","status":"completed","stop_reason":"end_turn","background":false}`)
			return
		}
		start := 0
		if a := r.URL.Query().Get("after"); a != "" {
			start, _ = strconv.Atoi(strings.TrimPrefix(a, "message-"))
			start++
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		var out []map[string]any
		for i := start; i < n && len(out) < limit; i++ {
			out = append(out, map[string]any{"id": "message-" + strconv.Itoa(i), "date": time.Now().Format(time.RFC3339Nano),
				"message_type": "assistant_message", "run_id": "run-1", "content": strings.Repeat(strconv.Itoa(i%10), size)})
		}
		_ = json.NewEncoder(w).Encode(out)
	}))
	t.Cleanup(srv.Close)
	for i := range n {
		if i > 0 {
			want.WriteString("\n\n") // how the state joins assistant messages
		}
		want.WriteString(strings.Repeat(strconv.Itoa(i%10), size))
	}
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second, MaxResponseBytes: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return c, want.String()
}

// A page of the run's messages over the client's MaxResponseBytes (8 MiB
// by default) is no sign of a broken server while one message fits: the
// poll asks for smaller pages, and the turn gets its whole answer instead
// of a permanent failure.
func TestPollPageTooLargeAsksForSmallerPages(t *testing.T) {
	c, want := bigRun(t, 30, 10<<10) // 30 messages of 10 KiB; the limit is 64 KiB
	b := budget.Default()
	r, err := New(Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	st := agentclient.NewStreamState()
	d := r.followWithin(context.Background(), Turn{AgentID: "agent-1", Otid: "o"}, st, Hooks{}, Result{RunID: "run-1"}, b.FollowLoop(time.Now()))
	if d.Outcome != Completed || st.Answer() != want {
		t.Fatalf("decision %v (%s), answer %d of %d bytes: want completed with the whole answer", d.Outcome, d.Reason, len(st.Answer()), len(want))
	}
}
