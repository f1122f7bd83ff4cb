package lettasim_test

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

type listItem struct {
	ID          string `json:"id"`
	MessageType string `json:"message_type"`
	Content     any    `json:"content"`
	RunID       string `json:"run_id"`
	Otid        string `json:"otid"`
}

func list(t *testing.T, srv *lettasim.Server, path string) []listItem {
	t.Helper()
	var items []listItem
	getJSON(t, srv, path, &items)
	return items
}

func contents(items []listItem) []string {
	var out []string
	for _, it := range items {
		s, _ := it.Content.(string)
		out = append(out, s)
	}
	return out
}

func TestHistory100kPagination(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("big", nil)
	t0 := time.Now()
	srv.SeedHistory(agent, 100_000)
	limit := time.Second
	if raceEnabled {
		limit = 4 * time.Second // the race detector makes allocation-heavy code ~10x slower
	}
	if d := time.Since(t0); d > limit {
		t.Fatalf("SeedHistory(100000) took %v", d)
	} else {
		t.Logf("SeedHistory(100000) took %v", d)
	}
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "live", Otid: "otid-live"})
	if err != nil {
		t.Fatal(err)
	}
	runID := evs[0].str("run_id")
	base := "/v1/agents/" + agent + "/messages"

	// Default: order desc, limit 100 rows; the newest row first. The live turn's model row
	// holds two messages (reasoning + assistant) that share its id; a page never splits a row.
	newest := list(t, srv, base+"?limit=3")
	if len(newest) != 4 || newest[0].MessageType != "reasoning_message" || newest[1].ID != newest[0].ID ||
		newest[2].Otid != "otid-live" || newest[3].Content != "seeded answer 49999" {
		t.Fatalf("newest page %+v", newest)
	}
	if got := list(t, srv, base); len(got) != 101 {
		t.Fatalf("default page has %d messages, want 100 rows = 101 messages", len(got))
	}

	first := list(t, srv, base+"?order=asc&limit=10")
	uuid4 := regexp.MustCompile(`^message-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)
	for _, it := range append(first, newest...) {
		if !uuid4.MatchString(it.ID) || it.RunID == "" || it.Otid == "" {
			t.Fatalf("seeded or live message with a bad id, run_id or otid: %+v", it)
		}
	}
	if got := contents(first); got[0] != "seeded question 0" || got[9] != "seeded answer 4" {
		t.Fatalf("oldest page %v", got)
	}
	// after/before follow the requested sort order.
	after5 := list(t, srv, base+"?order=asc&limit=3&after="+first[5].ID)
	if got := contents(after5); fmt.Sprint(got) != "[seeded question 3 seeded answer 3 seeded question 4]" {
		t.Fatalf("asc after row 5: %v", got)
	}
	older := list(t, srv, base+"?order=desc&limit=10&after="+first[5].ID)
	if got := contents(older); fmt.Sprint(got) != "[seeded question 2 seeded answer 1 seeded question 1 seeded answer 0 seeded question 0]" {
		t.Fatalf("desc after row 5 (= older): %v", got)
	}
	before := list(t, srv, base+"?order=asc&before="+first[3].ID)
	if got := contents(before); fmt.Sprint(got) != "[seeded question 0 seeded answer 0 seeded question 1]" {
		t.Fatalf("asc before row 3: %v", got)
	}
	between := list(t, srv, base+"?order=asc&after="+first[2].ID+"&before="+first[5].ID)
	if len(between) != 2 {
		t.Fatalf("between: %v", contents(between))
	}
	// A live-turn id as the cursor: what comes after it.
	tail := list(t, srv, base+"?order=asc&after="+newest[3].ID)
	if len(tail) != 3 || tail[0].Otid != "otid-live" || tail[1].RunID != runID {
		t.Fatalf("tail %+v", tail)
	}
	// Unknown cursor: 404.
	st, _, data := call(t, srv, "GET", base+"?after=message-00000000-0000-4000-8000-000000000000", nil)
	if st != 404 {
		t.Fatalf("unknown cursor: %d", st)
	}
	detail(t, data)
	if st, _, _ := call(t, srv, "GET", base+"?limit=0", nil); st != 422 {
		t.Fatalf("limit=0: %d", st)
	}
	if st, _, _ := call(t, srv, "GET", base+"?order=sideways", nil); st != 422 {
		t.Fatalf("bad order: %d", st)
	}

	// Cost: a cursor is an index lookup, so a page near the start of 100k messages costs what a
	// page of a 20-message history does. Compared in-process (ServeHTTP, no sockets) and
	// interleaved, so machine load and -race affect both sides alike.
	small := srv.CreateAgent("small", nil)
	srv.SeedHistory(small, 20)
	smallFirst := list(t, srv, "/v1/agents/"+small+"/messages?order=asc&limit=10")
	page := func(path string) time.Duration {
		req := httptest.NewRequest("GET", path, nil)
		rec := httptest.NewRecorder()
		t0 := time.Now()
		srv.Sim.ServeHTTP(rec, req)
		d := time.Since(t0)
		if rec.Code != 200 {
			t.Fatalf("%s: %d", path, rec.Code)
		}
		return d
	}
	var bigT, smallT time.Duration
	const n = 300
	for i := 0; i < n; i++ {
		bigT += page(base + "?order=asc&limit=10&after=" + first[i%9].ID)
		smallT += page("/v1/agents/" + small + "/messages?order=asc&limit=10&after=" + smallFirst[i%9].ID)
	}
	t.Logf("cursor pages: %v/page on 100k messages, %v/page on 20", bigT/n, smallT/n)
	if bigT > 4*smallT {
		t.Fatalf("a cursor page over 100k messages costs %.1fx one over 20: the cursor is not indexed", float64(bigT)/float64(smallT))
	}
	// And over the wire, a page is small.
	srv.ResetRequests()
	for i := 0; i < 10; i++ {
		list(t, srv, base+"?order=asc&limit=10&after="+first[i%9].ID)
	}
	if stats := srv.Requests().Get(lettasim.EndpointListMessages); stats.Requests != 10 || stats.Bytes/10 > 8000 {
		t.Fatalf("stats %+v", stats)
	}
}

func TestDescPagesOldestFirstQuirk(t *testing.T) {
	srv := newServer(t, lettasim.Config{DescPagesOldestFirst: true})
	agent := srv.CreateAgent("quirk", nil)
	srv.SeedHistory(agent, 10)
	got := contents(list(t, srv, "/v1/agents/"+agent+"/messages?limit=3"))
	if fmt.Sprint(got) != "[seeded answer 3 seeded question 4 seeded answer 4]" {
		t.Fatalf("desc page with quirk: %v", got)
	}
}

// Polling a run's messages with after=<last id> returns only what is new, even on an agent
// with 100k messages.
func TestRunMessagesPollAfter(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("poll", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "let me search"},
		{Kind: lettasim.ToolCall, ToolName: "web_search"},
		{Kind: lettasim.ToolReturn, Delay: 200 * time.Second}, // 200ms
		{Kind: lettasim.Reasoning, Text: "got it"},
		{Kind: lettasim.Assistant, Text: "the answer"},
	}})
	srv.SeedHistory(agent, 100_000)
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "poll me", Otid: "otid-poll"}.body())
	if st != 200 {
		t.Fatal(st)
	}
	var run struct{ ID string }
	_ = json.Unmarshal(data, &run)
	base := "/v1/runs/" + run.ID + "/messages"

	// The user message is there at once.
	page1 := list(t, srv, base)
	if len(page1) == 0 || page1[0].Otid != "otid-poll" {
		t.Fatalf("first poll %+v", page1)
	}
	last := page1[len(page1)-1].ID
	if err := srv.WaitRunDone(testCtx(t), run.ID); err != nil {
		t.Fatal(err)
	}
	page2 := list(t, srv, base+"?after="+last)
	all := append(page1, page2...)
	var got []string
	for _, m := range all {
		got = append(got, m.MessageType)
	}
	want := []string{"user_message", "reasoning_message", "tool_call_message", "tool_return_message", "reasoning_message", "assistant_message"}
	if !eqStrings(got, want) {
		t.Fatalf("polled %v", got)
	}
	for _, m := range page2 {
		if m.ID == last {
			t.Fatal("after=<id> returned the cursor row again")
		}
	}
	srv.ResetRequests()
	empty := list(t, srv, base+"?after="+all[len(all)-1].ID)
	if len(empty) != 0 || srv.Requests().Get(lettasim.EndpointRunMessages).Bytes != 2 {
		t.Fatalf("poll with nothing new: %d items, %+v", len(empty), srv.Requests().Get(lettasim.EndpointRunMessages))
	}
	// A cursor from another run is unknown here.
	seeded := list(t, srv, "/v1/agents/"+agent+"/messages?order=asc&limit=1")
	if st, _, _ := call(t, srv, "GET", base+"?after="+seeded[0].ID, nil); st != 404 {
		t.Fatalf("foreign cursor: %d", st)
	}
	// order=desc and limit.
	desc := list(t, srv, base+"?order=desc&limit=2")
	if len(desc) != 3 || desc[2].MessageType != "tool_return_message" {
		t.Fatalf("desc %+v", desc)
	}
}
