package continuation

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// historyServer serves an agent's history (GET /v1/agents/{id}/messages,
// order=desc, after=, limit=) from rows, newest first. ignoreAfter makes it
// answer every page as the first.
func historyServer(t *testing.T, rows []map[string]any, ignoreAfter bool) *Runner {
	return historyServerLimited(t, rows, ignoreAfter, 0, 2)
}

// historyServerLimited is historyServer with the client's MaxResponseBytes
// (0: the default) and the search's page size.
func historyServerLimited(t *testing.T, rows []map[string]any, ignoreAfter bool, maxResponse, pageSize int) *Runner {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := 0
		if a := r.URL.Query().Get("after"); a != "" && !ignoreAfter {
			for i, m := range rows {
				if m["id"] == a {
					start = i + 1
				}
			}
		}
		limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
		end := min(len(rows), start+limit)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(rows[start:end])
	}))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second, MaxResponseBytes: maxResponse})
	if err != nil {
		t.Fatal(err)
	}
	r, err := New(Config{Client: c, Budget: budget.Default(), HistoryPageSize: pageSize})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func row(id, typ, otid string, date time.Time) map[string]any {
	m := map[string]any{"id": id, "date": date.UTC().Format(time.RFC3339Nano), "message_type": typ, "run_id": "run-" + id}
	if typ == "user_message" {
		m["otid"], m["content"] = otid, "hi"
	} else {
		m["content"] = "text"
	}
	return m
}

// A row dated long ago that sits after the turn's message (newer in the
// history's order: a message stored late, or imported with its own date)
// does not end the search before the turn's message is reached: the search
// stops at a page that is all older than the turn.
func TestSearchGoesOnPastAnOldDatedRow(t *testing.T) {
	now := time.Now()
	rows := []map[string]any{
		row("m5", "assistant_message", "", now),
		row("m4", "user_message", "other", now.Add(-30*24*time.Hour)), // dated a month ago, stored late
		row("m3", "assistant_message", "", now.Add(-time.Second)),
		row("m2", "user_message", "ours", now.Add(-2*time.Second)),
		row("m1", "assistant_message", "", now.Add(-48*time.Hour)),
	}
	r := historyServer(t, rows, false)
	loop := r.b.AdmissionLoop(time.Now())
	runID, found, err := r.searchOnce(context.Background(), loop, Turn{AgentID: "agent-1", Otid: "ours", Started: now.Add(-time.Minute)}, &Result{})
	if !found || runID != "run-m2" || err != nil {
		t.Fatalf("searchOnce = %q found=%v err=%v: want the turn's message (run-m2)", runID, found, err)
	}
}

// A server that ignores the `after` cursor answers the same page again:
// that is no complete search of the history (the turn's message may be on
// a page it never gave), so it is no evidence that the message was not
// admitted.
func TestSearchOnAServerIgnoringAfterIsIncomplete(t *testing.T) {
	now := time.Now()
	rows := []map[string]any{
		row("m4", "assistant_message", "", now),
		row("m3", "user_message", "other", now.Add(-time.Second)),
		row("m2", "user_message", "ours", now.Add(-2*time.Second)),
	}
	r := historyServer(t, rows, true)
	loop := r.b.AdmissionLoop(time.Now())
	_, found, err := r.searchOnce(context.Background(), loop, Turn{AgentID: "agent-1", Otid: "ours", Started: now.Add(-time.Minute)}, &Result{})
	if found || err == nil {
		t.Fatalf("searchOnce found=%v err=%v: want an incomplete search (an error), not a complete one", found, err)
	}
}

// A history page over the client's MaxResponseBytes (8 MiB by default),
// while one message fits, makes the search ask for smaller pages rather
// than fail the turn for good.
func TestSearchPageTooLargeAsksForSmallerPages(t *testing.T) {
	now := time.Now()
	var rows []map[string]any
	for i := 40; i > 0; i-- {
		m := row("m"+strconv.Itoa(i), "assistant_message", "", now.Add(-time.Duration(40-i)*time.Second))
		m["content"] = strings.Repeat("x", 10<<10)
		rows = append(rows, m)
	}
	rows = append(rows, row("m0", "user_message", "ours", now.Add(-50*time.Second)))
	r := historyServerLimited(t, rows, false, 64<<10, 50) // 41 messages of 10 KiB; the limit is 64 KiB
	loop := r.b.AdmissionLoop(time.Now())
	runID, found, err := r.searchOnce(context.Background(), loop, Turn{AgentID: "agent-1", Otid: "ours", Started: now.Add(-time.Minute)}, &Result{})
	if !found || runID != "run-m0" || err != nil {
		t.Fatalf("searchOnce = %q found=%v err=%v: want the turn's message (run-m0)", runID, found, err)
	}
}

// A history shorter than a page is the whole history, whatever the
// cursor: a server that ignores `after` answers the same short page again,
// and the search must not wait for that second page to end. A short page
// ends the search, complete: the message was not stored.
func TestSearchShortPageOnAServerIgnoringAfterIsComplete(t *testing.T) {
	now := time.Now()
	rows := []map[string]any{
		row("m2", "assistant_message", "", now),
		row("m1", "user_message", "other", now.Add(-time.Second)),
	}
	r := historyServerLimited(t, rows, true, 0, 50)
	loop := r.b.AdmissionLoop(time.Now())
	_, found, err := r.searchOnce(context.Background(), loop, Turn{AgentID: "agent-1", Otid: "ours", Started: now.Add(-time.Minute)}, &Result{})
	if found || err != nil {
		t.Fatalf("searchOnce found=%v err=%v: want a complete search that did not find the otid", found, err)
	}
}
