package lettasim_test

import (
	"bufio"
	"encoding/json"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

func resume(t *testing.T, srv *lettasim.Server, runID string, body string) (int, []event, error, []byte) {
	t.Helper()
	resp := do(t, srv, "POST", "/v1/runs/"+runID+"/stream", body, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, nil, data
	}
	evs, err := newSSE(t, resp.Body).all()
	return 200, evs, err, nil
}

// Background streams number every chunk; a resume from seq_id N returns only the later chunks.
func TestBackgroundSeqAndResume(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("resume", nil)
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim tool=web_search]] bg", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	runID := evs[0].str("run_id")
	if evs[0].typ() != "ping" || evs[0].seq() != 0 {
		t.Fatalf("first ping %s", evs[0].Data)
	}
	chunks := evs[1:]
	for i, e := range chunks[:len(chunks)-1] {
		if e.seq() != i+1 {
			t.Fatalf("chunk %d (%s) has seq_id %d", i, e.typ(), e.seq())
		}
	}
	if chunks[len(chunks)-1].typ() != "[DONE]" {
		t.Fatal("no [DONE]")
	}
	for _, k := range []int{0, 3, len(chunks) - 2, len(chunks) - 1} {
		st, got, err, data := resume(t, srv, runID, `{"starting_after": `+strconv.Itoa(k)+`, "include_pings": true, "poll_interval": 0.1, "batch_size": 100}`)
		if st != 200 || err != nil {
			t.Fatalf("resume after %d: %d %v %s", k, st, err, data)
		}
		if got[0].typ() != "ping" || got[0].str("run_id") != runID || got[0].seq() != k {
			t.Fatalf("resume after %d: first event %s", k, got[0].Data)
		}
		got = got[1:]
		want := chunks[k:]
		if len(got) != len(want) {
			t.Fatalf("resume after %d: %d chunks, want %d", k, len(got), len(want))
		}
		for i := range got {
			if got[i].Data != want[i].Data {
				t.Fatalf("resume after %d: chunk %d differs:\n%s\n%s", k, i, got[i].Data, want[i].Data)
			}
		}
	}
	// {} starts from the beginning; include_pings:false has no first ping.
	_, got, _, _ := resume(t, srv, runID, `{"include_pings": false}`)
	if len(got) != len(chunks) || got[0].Data != chunks[0].Data {
		t.Fatalf("resume {}: %v", types(got))
	}
	// A body is required.
	if st, _, _, data := resume(t, srv, runID, ""); st != 422 {
		t.Fatalf("resume without body: %d %s", st, data)
	}
	// A foreground run cannot be resumed.
	_, fg, _ := streamTurn(t, srv, agent, turnReq{Text: "fg"})
	st, _, _, data := resume(t, srv, fg[0].str("run_id"), `{}`)
	if st != 400 {
		t.Fatalf("resume foreground: %d", st)
	}
	detail(t, data)
	if st, _, _, _ := resume(t, srv, "run-nope", `{}`); st != 404 {
		t.Fatalf("resume unknown run: %d", st)
	}
}

// Cut a background stream mid-run, then resume from the last seq_id seen: the rest arrives,
// with pings while the run thinks.
func TestResumeWhileRunning(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 5 * time.Millisecond})
	agent := srv.CreateAgent("resume-live", slowAnswer(300*time.Second)) // 300ms
	srv.SetFault(agent, lettasim.Fault{DisconnectAfter: 2})
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "x", Background: true}.body(), nil)
	evs, err := newSSE(t, resp.Body).all()
	resp.Body.Close()
	if err == nil || len(evs) != 2 {
		t.Fatalf("want a cut after 2 events: %v %v", types(evs), err)
	}
	runID, last := evs[1].str("run_id"), evs[1].seq()
	st, got, err, _ := resume(t, srv, runID, `{"starting_after": `+strconv.Itoa(last)+`}`)
	if st != 200 || err != nil {
		t.Fatal(st, err)
	}
	pings := 0
	for _, e := range got {
		if e.typ() == "ping" {
			pings++
		}
	}
	if pings < 2 {
		t.Errorf("resume got %d pings while the run was thinking", pings)
	}
	got = withoutPings(got)
	if tp := types(got); !eqStrings(tp, []string{"assistant_message", "stop_reason", "usage_statistics", "[DONE]"}) || got[0].seq() != last+1 {
		t.Fatalf("resumed %v", tp)
	}
}

func TestResumeRefusals(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("refuse", nil)
	for _, status := range []int{400, 410, 503} {
		srv.SetFault(agent, lettasim.Fault{ResumeStatus: status})
		_, evs, _ := streamTurn(t, srv, agent, turnReq{Text: "x", Background: true})
		st, _, _, data := resume(t, srv, evs[0].str("run_id"), `{}`)
		if st != status {
			t.Fatalf("ResumeStatus %d: got %d", status, st)
		}
		detail(t, data)
	}
	// Too old.
	old := newServer(t, lettasim.Config{ResumeMaxAge: time.Nanosecond})
	agent = old.CreateAgent("old", nil)
	_, evs, _ := streamTurn(t, old, agent, turnReq{Text: "x", Background: true})
	if st, _, _, _ := resume(t, old, evs[0].str("run_id"), `{}`); st != 410 {
		t.Fatalf("old run: %d", st)
	}
}

// The cancel endpoint stops a running run; the stream ends with the cancelled stop reason.
func TestCancelEndpoint(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("cancel", slowAnswer(time.Hour))
	resp, err := srv.Client().Post(srv.URL+"/v1/agents/"+agent+"/messages/stream", "application/json",
		strings.NewReader(`{"messages":[{"role":"user","content":"long","otid":"otid-cancel"}],"background":true}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var head strings.Builder
	br := bufio.NewReader(io.TeeReader(resp.Body, &head))
	sse := newSSE(t, br)
	for { // read until the run has reasoned, so there is something to keep
		ev, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.typ() == "reasoning_message" {
			break
		}
	}
	rec, err := srv.WaitOtid(testCtx(t), "otid-cancel")
	if err != nil {
		t.Fatal(err)
	}
	// Nothing running for another agent: 409.
	other := srv.CreateAgent("idle", nil)
	st, _, data := call(t, srv, "POST", "/v1/agents/"+other+"/messages/cancel", nil)
	if st != 409 {
		t.Fatalf("cancel idle agent: %d", st)
	}
	detail(t, data)

	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", map[string]any{"run_ids": []string{rec.RunID}})
	var res map[string]string
	if st != 200 || json.Unmarshal(data, &res) != nil || res[rec.RunID] != "cancelled" {
		t.Fatalf("cancel: %d %s", st, data)
	}
	if _, err := io.ReadAll(br); err != nil { // the tee has the whole stream in head
		t.Fatal(err)
	}
	stream := head.String()
	if !strings.HasSuffix(string(stream), "data: {\"message_type\": \"stop_reason\", \"stop_reason\": \"cancelled\"}\n\ndata: [DONE]\n\n") {
		t.Fatalf("stream end %q", stream)
	}
	evs, err := newSSE(t, strings.NewReader(string(stream))).all()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		conformEvent(t, e)
	}
	var run map[string]any
	getJSON(t, srv, "/v1/runs/"+rec.RunID, &run)
	if run["status"] != "cancelled" || run["stop_reason"] != "cancelled" {
		t.Fatalf("run %v", run)
	}
	// The reasoning already produced stays in history.
	if h := srv.History(agent); len(h) != 2 || h[1].Type != "reasoning_message" {
		t.Fatalf("history %+v", h)
	}
	// Nothing left to cancel.
	if st, _, _ := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", map[string]any{}); st != 409 {
		t.Fatalf("second cancel: %d", st)
	}
}

func TestListRuns(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	a := srv.CreateAgent("runs-a", nil)
	b := srv.CreateAgent("runs-b", nil)
	for i := 0; i < 3; i++ {
		streamTurn(t, srv, a, turnReq{Text: "a" + strconv.Itoa(i)})
	}
	streamTurn(t, srv, b, turnReq{Text: "b"})
	srv.SetScript(a, slowAnswer(time.Hour))
	st, _, data := call(t, srv, "POST", "/v1/agents/"+a+"/messages/async", turnReq{Text: "long", Otid: "otid-long"}.body())
	if st != 200 {
		t.Fatal(st)
	}
	var long map[string]any
	_ = json.Unmarshal(data, &long)

	var runs []map[string]any
	data = getJSON(t, srv, "/v1/runs/?agent_id="+a, &runs)
	var items []json.RawMessage
	_ = json.Unmarshal(data, &items)
	for _, it := range items {
		conform(t, "Run", it)
	}
	if len(runs) != 4 || runs[0]["id"] != long["id"] {
		t.Fatalf("runs of a (desc): %d, first %v", len(runs), runs[0]["id"])
	}
	getJSON(t, srv, "/v1/runs/?agent_id="+a+"&active=true", &runs)
	if len(runs) != 1 || runs[0]["id"] != long["id"] || runs[0]["status"] != "running" {
		t.Fatalf("active runs %v", runs)
	}
	getJSON(t, srv, "/v1/runs/?agent_id="+a+"&statuses=completed&order=asc&limit=2", &runs)
	if len(runs) != 2 || runs[0]["status"] != "completed" {
		t.Fatalf("completed runs %v", runs)
	}
	getJSON(t, srv, "/v1/runs/?limit=100", &runs)
	if len(runs) != 5 {
		t.Fatalf("all runs %d", len(runs))
	}
	getJSON(t, srv, "/v1/runs", &runs) // without the trailing slash
	if len(runs) != 5 {
		t.Fatalf("all runs %d", len(runs))
	}
	if !srv.Cancel(testCtx(t), long["id"].(string)) {
		t.Fatal("Cancel")
	}
	if err := srv.WaitIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
}

// /latest/ is an alias of /v1/.
func TestLatestAlias(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("latest", nil)
	resp := do(t, srv, "POST", "/latest/agents/"+agent+"/messages/stream", turnReq{Text: "alias"}.body(), nil)
	evs, err := newSSE(t, resp.Body).all()
	resp.Body.Close()
	if err != nil || evs[len(evs)-1].typ() != "[DONE]" {
		t.Fatalf("%v %v", types(evs), err)
	}
	var msgs []map[string]any
	getJSON(t, srv, "/latest/agents/"+agent+"/messages", &msgs)
	if len(msgs) != 3 {
		t.Fatalf("%d messages", len(msgs))
	}
}

func TestRequestStats(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("stats", nil)
	_, evs, _ := streamTurn(t, srv, agent, turnReq{Text: "x"})
	runID := evs[0].str("run_id")
	for i := 0; i < 3; i++ {
		getJSON(t, srv, "/v1/runs/"+runID+"/messages", nil)
	}
	_, _, body := call(t, srv, "GET", "/v1/runs/"+runID, nil)
	call(t, srv, "GET", "/v1/runs/run-nope", nil)
	st := srv.Requests()
	if got := st.Get(lettasim.EndpointRunMessages); got.Requests != 3 || got.Bytes == 0 {
		t.Fatalf("run messages stats %+v", got)
	}
	if got := st.Get(lettasim.EndpointGetRun); got.Requests != 2 || got.Errors != 1 || got.Bytes <= int64(len(body)) {
		t.Fatalf("get run stats %+v", got)
	}
	if got := st.Get(lettasim.EndpointStream); got.Requests != 1 || got.Bytes == 0 {
		t.Fatalf("stream stats %+v", got)
	}
	if st.Total.Requests != 6 {
		t.Fatalf("total %+v", st.Total)
	}
	srv.ResetRequests()
	if srv.Requests().Total.Requests != 0 {
		t.Fatal("reset")
	}
}
