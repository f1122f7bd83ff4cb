package lettasim_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// slowAnswer reasons at once, then answers after d (scaled), so a stream can be cut mid-run.
func slowAnswer(d time.Duration) *lettasim.Script {
	return &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "thinking"},
		{Kind: lettasim.Assistant, Text: "late answer", Delay: d},
	}}
}

// The client goes away (server cut) mid-run: the run goes on and its messages land in history.
func TestDisconnectDoesNotCancel(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("disconnect", slowAnswer(50*time.Second))
	srv.SetFault(agent, lettasim.Fault{DisconnectAfter: 2}) // ping, reasoning, cut
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "cut me", Otid: "otid-cut"}.body(), nil)
	evs, err := newSSE(t, resp.Body).all()
	resp.Body.Close()
	if err == nil {
		t.Fatalf("want an abrupt end (unexpected EOF), got a clean one: %v", types(evs))
	}
	if got := types(evs); !eqStrings(got, []string{"ping", "reasoning_message"}) {
		t.Fatalf("events before the cut: %v", got)
	}
	runID := evs[0].str("run_id")
	if info, _ := srv.Run(runID); info.Status == "cancelled" {
		t.Fatalf("the cut cancelled the run")
	}
	if err := srv.WaitRunDone(testCtx(t), runID); err != nil {
		t.Fatal(err)
	}
	info, _ := srv.Run(runID)
	if info.Status != "completed" || info.StopReason != "end_turn" {
		t.Fatalf("run %+v", info)
	}
	var msgs []map[string]any
	data := getJSON(t, srv, "/v1/runs/"+runID+"/messages", &msgs)
	conformMessages(t, data)
	var got []string
	for _, m := range msgs {
		got = append(got, m["message_type"].(string))
	}
	if !eqStrings(got, []string{"user_message", "reasoning_message", "assistant_message"}) || msgs[2]["content"] != "late answer" {
		t.Fatalf("run messages %v", got)
	}
	if srv.CountOtid("otid-cut") != 1 {
		t.Fatal("want exactly one stored user message")
	}
	// The next turn is not affected (the fault was for one turn).
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "again"}); err != nil {
		t.Fatal(err)
	}
}

func TestStatus5xxAfterStore(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("after-store", slowAnswer(20*time.Second))
	srv.SetFault(agent, lettasim.Fault{Status5xxAfterStore: 502})
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "x", Otid: "otid-502"}.body())
	if st != 502 {
		t.Fatalf("status %d", st)
	}
	detail(t, data)
	rec, err := srv.WaitOtid(testCtx(t), "otid-502")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitRunDone(testCtx(t), rec.RunID); err != nil {
		t.Fatal(err)
	}
	if info, _ := srv.Run(rec.RunID); info.Status != "completed" {
		t.Fatalf("run %+v", info)
	}
	hist := srv.History(agent)
	if len(hist) != 3 || hist[2].Text != "late answer" || hist[0].Otid != "otid-502" {
		t.Fatalf("history %+v", hist)
	}
}

func TestStatus5xxBeforeStoreAnd429(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("before-store", nil)
	path := "/v1/agents/" + agent + "/messages/stream"

	srv.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503})
	st, _, data := call(t, srv, "POST", path, turnReq{Text: "x", Otid: "otid-503"}.body())
	if st != 503 {
		t.Fatalf("status %d", st)
	}
	detail(t, data)

	srv.SetFault(agent, lettasim.Fault{Status429: true, RetryAfter: 3000 * time.Second}) // 3s at scale 0.001
	st, hdr, data := call(t, srv, "POST", path, turnReq{Text: "x", Otid: "otid-503"}.body())
	if st != 429 || hdr.Get("Retry-After") != "3" {
		t.Fatalf("429: %d Retry-After %q", st, hdr.Get("Retry-After"))
	}
	detail(t, data)
	if srv.CountOtid("otid-503") != 0 || len(srv.Runs(agent)) != 0 || len(srv.History(agent)) != 0 {
		t.Fatal("a 5xx-before-store or 429 stored something")
	}
	// Both faults were one-shot: the retry goes through, and exactly one message is stored.
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "x", Otid: "otid-503"}); err != nil {
		t.Fatal(err)
	}
	if n := srv.CountOtid("otid-503"); n != 1 {
		t.Fatalf("CountOtid %d", n)
	}
}

func TestFaultTimesAndPersistent(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("times", nil)
	path := "/v1/agents/" + agent + "/messages/stream"
	srv.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 500, Times: 2})
	for i, want := range []int{500, 500, 200} {
		resp := do(t, srv, "POST", path, turnReq{Text: "x"}.body(), nil)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Fatalf("attempt %d: %d, want %d", i, resp.StatusCode, want)
		}
	}
	srv.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 500, Persistent: true})
	for i := 0; i < 3; i++ {
		st, _, _ := call(t, srv, "POST", path, turnReq{Text: "x"}.body())
		if st != 500 {
			t.Fatalf("persistent attempt %d: %d", i, st)
		}
	}
	srv.ClearFault(agent)
	if st, _, _ := call(t, srv, "POST", path, turnReq{Text: "x"}.body()); st != 200 {
		t.Fatalf("after ClearFault: %d", st)
	}
}

func TestDropBeforeResponse(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("drop", nil)
	srv.SetFault(agent, lettasim.Fault{DropBeforeResponse: true})
	req, _ := http.NewRequestWithContext(testCtx(t), "POST", srv.URL+"/v1/agents/"+agent+"/messages/stream",
		strings.NewReader(`{"messages":[{"role":"user","content":"drop","otid":"otid-drop"}]}`))
	resp, err := srv.Client().Do(req)
	if err == nil {
		resp.Body.Close()
		t.Fatalf("want a connection error, got %d", resp.StatusCode)
	}
	rec, err := srv.WaitOtid(testCtx(t), "otid-drop")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitRunDone(testCtx(t), rec.RunID); err != nil {
		t.Fatal(err)
	}
	if info, _ := srv.Run(rec.RunID); info.Status != "completed" {
		t.Fatalf("run %+v", info)
	}
}

// FirstByteDelay: stored and running, but not a byte (not even headers) for the delay.
func TestFirstByteDelay(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("first-byte", nil)
	srv.SetFault(agent, lettasim.Fault{FirstByteDelay: 150 * time.Second}) // 150ms
	start := time.Now()
	type result struct {
		resp *http.Response
		at   time.Time
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest("POST", srv.URL+"/v1/agents/"+agent+"/messages/stream",
			strings.NewReader(`{"messages":[{"role":"user","content":"slow","otid":"otid-fb"}]}`))
		resp, err := srv.Client().Do(req)
		if err != nil {
			got <- result{}
			return
		}
		got <- result{resp, time.Now()}
	}()
	if _, err := srv.WaitOtid(testCtx(t), "otid-fb"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-got:
		t.Fatal("response headers arrived before the first-byte delay")
	default:
	}
	r := <-got
	if r.resp == nil {
		t.Fatal("request failed")
	}
	defer r.resp.Body.Close()
	if d := r.at.Sub(start); d < 140*time.Millisecond {
		t.Fatalf("headers after %v, want >= 150ms", d)
	}
	evs, err := newSSE(t, r.resp.Body).all()
	if err != nil || evs[len(evs)-1].typ() != "[DONE]" {
		t.Fatalf("%v %v", types(evs), err)
	}
}

// AdmitDelay: a client that gives up while the server is admitting leaves nothing behind.
func TestAdmitDelayNothingStored(t *testing.T) {
	srv := lettasim.NewServer(lettasim.Config{TimeScale: 0.001})
	agent := srv.CreateAgent("admit", nil)
	srv.SetFault(agent, lettasim.Fault{AdmitDelay: lettasim.Forever})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/agents/"+agent+"/messages/stream",
		strings.NewReader(`{"messages":[{"role":"user","content":"admit","otid":"otid-admit"}]}`))
	if resp, err := srv.Client().Do(req); err == nil {
		resp.Body.Close()
		t.Fatal("want a timeout")
	}
	srv.Close() // waits for the handler
	if srv.CountOtid("otid-admit") != 0 || len(srv.Runs(agent)) != 0 {
		t.Fatal("stored during admit delay")
	}
}

// Stall: no bytes, no pings, then the stream catches up; the run went on meanwhile.
func TestStallThenCatchUp(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 2 * time.Millisecond})
	agent := srv.CreateAgent("stall", nil)
	srv.SetFault(agent, lettasim.Fault{StallAfter: 1, StallFor: 120 * time.Second}) // 120ms
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "stall"}.body(), nil)
	defer resp.Body.Close()
	sse := newSSE(t, resp.Body)
	first, err := sse.next()
	if err != nil || first.typ() != "ping" {
		t.Fatalf("first event %v %v", first.typ(), err)
	}
	t0 := time.Now()
	second, err := sse.next()
	if err != nil {
		t.Fatal(err)
	}
	if gap := time.Since(t0); gap < 60*time.Millisecond { // ~2ms without the stall
		t.Fatalf("gap %v: want a ~120ms stall with no pings although PingInterval is 2ms", gap)
	}
	// The run finished during the stall: the connection was stuck, not the run.
	if info, _ := srv.Run(first.str("run_id")); info.Status != "completed" {
		t.Fatalf("run during stall: %+v", info)
	}
	rest, err := sse.all()
	if err != nil {
		t.Fatal(err)
	}
	all := withoutPings(append([]event{second}, rest...))
	if got := types(all); !eqStrings(got, []string{"reasoning_message", "assistant_message", "stop_reason", "usage_statistics", "[DONE]"}) {
		t.Fatalf("after the stall: %v", got)
	}
}

// A stall forever holds the connection silent until the client goes away.
func TestStallForever(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 2 * time.Millisecond})
	agent := srv.CreateAgent("stall-forever", nil)
	srv.SetFault(agent, lettasim.Fault{StallAfter: 0, StallFor: lettasim.Forever})
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL+"/v1/agents/"+agent+"/messages/stream",
		strings.NewReader(`{"messages":[{"role":"user","content":"stall","otid":"otid-stall"}]}`))
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("status %d", resp.StatusCode)
	}
	rec, err := srv.WaitOtid(testCtx(t), "otid-stall")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitRunDone(testCtx(t), rec.RunID); err != nil {
		t.Fatal(err)
	}
	read := make(chan int, 1)
	go func() {
		n, _ := resp.Body.Read(make([]byte, 1024))
		read <- n
	}()
	select {
	case n := <-read:
		t.Fatalf("read %d bytes from a stalled stream", n)
	case <-time.After(60 * time.Millisecond): // negative assertion: nothing arrives
	}
	cancel()
	if n := <-read; n != 0 {
		t.Fatalf("read %d bytes", n)
	}
}

func readEvents(t *testing.T, srv *lettasim.Server, agent string, tr turnReq) ([]event, error, string) {
	t.Helper()
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", tr.body(), nil)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	evs, err := newSSE(t, strings.NewReader(string(raw))).all()
	return evs, err, string(raw)
}

// Runs that end with a stop reason other than end_turn.
func TestEndWith(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	cases := []struct {
		name       string
		fault      lettasim.Fault
		background bool
		want       []string
		status     string
		stop       string
	}{
		{"error after reasoning", lettasim.Fault{EndWith: "error", EndAfter: 1}, false,
			[]string{"ping", "reasoning_message", "stop_reason", "error:error_message"}, "failed", "error"},
		{"llm_api_error at once, background", lettasim.Fault{EndWith: "llm_api_error"}, true,
			[]string{"ping", "stop_reason", "error:error_message"}, "failed", "llm_api_error"},
		{"cancelled", lettasim.Fault{EndWith: "cancelled", EndAfter: 1}, false,
			[]string{"ping", "reasoning_message", "stop_reason", "[DONE]"}, "cancelled", "cancelled"},
		{"max_steps after all", lettasim.Fault{EndWith: "max_steps", EndAfter: -1}, false,
			[]string{"ping", "reasoning_message", "assistant_message", "stop_reason", "usage_statistics", "[DONE]"}, "completed", "max_steps"},
		{"unhandled exception", lettasim.Fault{UnhandledException: true, EndAfter: 1}, false,
			[]string{"ping", "reasoning_message", "error:INTERNAL_SERVER_ERROR"}, "failed", "error"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agent := srv.CreateAgent(c.name, nil)
			srv.SetFault(agent, c.fault)
			evs, err, raw := readEvents(t, srv, agent, turnReq{Text: "x", Background: c.background})
			if err != nil {
				t.Fatal(err)
			}
			if got := types(evs); !eqStrings(got, c.want) {
				t.Fatalf("events %v, want %v", got, c.want)
			}
			for _, e := range evs {
				conformEvent(t, e)
			}
			runID := evs[0].str("run_id")
			if err := srv.WaitRunDone(testCtx(t), runID); err != nil {
				t.Fatal(err)
			}
			info, _ := srv.Run(runID)
			if info.Status != c.status || info.StopReason != c.stop {
				t.Fatalf("run %s/%s, want %s/%s", info.Status, info.StopReason, c.status, c.stop)
			}
			switch c.stop {
			case "cancelled":
				if !strings.Contains(raw, "data: {\"message_type\": \"stop_reason\", \"stop_reason\": \"cancelled\"}\n\ndata: [DONE]\n\n") {
					t.Fatalf("cancelled stop reason not written as Letta does: %q", raw)
				}
			case "error", "llm_api_error":
				last := evs[len(evs)-1]
				if strings.HasSuffix(raw, "[DONE]\n\n") {
					t.Fatal("a failing stream must not send [DONE]")
				}
				if last.str("message_type") == "error_message" {
					if last.str("run_id") != runID || last.str("error_type") == "" {
						t.Fatalf("error message %s", last.Data)
					}
					if c.background != (last.seq() > 0) {
						t.Fatalf("error message seq_id %d (background %v)", last.seq(), c.background)
					}
				}
			}
		})
	}
}

func TestApprovalAndMaxSteps(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim approval=delete_file]] delete it"})
	if err != nil {
		t.Fatal(err)
	}
	evs = withoutPings(evs)
	if got := types(evs); !eqStrings(got, []string{"reasoning_message", "approval_request_message", "stop_reason", "usage_statistics", "[DONE]"}) {
		t.Fatalf("%v", got)
	}
	if evs[2].str("stop_reason") != "requires_approval" {
		t.Fatal(evs[2].Data)
	}
	for _, e := range evs {
		conformEvent(t, e)
	}
	// The thread waits for the answer (approvals_test.go); answer it.
	if _, _, err := streamTurn(t, srv, agent, turnReq{Approvals: answers(requestedCalls(t, evs), true, "")}); err != nil {
		t.Fatal(err)
	}
	// max_steps in the request bounds the model steps.
	_, evs, err = streamTurn(t, srv, agent, turnReq{Text: "[[sim tool=a,b,c]]", Extra: map[string]any{"max_steps": 2}})
	if err != nil {
		t.Fatal(err)
	}
	evs = withoutPings(evs)
	stop := evs[len(evs)-3]
	if stop.str("stop_reason") != "max_steps" {
		t.Fatalf("%v", types(evs))
	}
	if info := srv.Runs(agent)[2]; info.Status != "completed" || info.StopReason != "max_steps" {
		t.Fatalf("%+v", info)
	}
}

func TestListFaults(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("list-faults", nil)
	_, evs, _ := streamTurn(t, srv, agent, turnReq{Text: "x"})
	runID := evs[0].str("run_id")
	srv.SetListFault(agent, lettasim.ListFault{Fail: 3})
	for i, p := range []string{"/v1/agents/" + agent + "/messages", "/v1/runs/" + runID, "/v1/runs/" + runID + "/messages", "/v1/runs/" + runID} {
		st, _, data := call(t, srv, "GET", p, nil)
		want := 503
		if i == 3 {
			want = 200
		}
		if st != want {
			t.Fatalf("%s: %d, want %d: %s", p, st, want, data)
		}
		if st == 503 {
			detail(t, data)
		}
	}
	srv.SetListFault(agent, lettasim.ListFault{Delay: 100 * time.Second}) // 100ms
	t0 := time.Now()
	getJSON(t, srv, "/v1/runs/"+runID, nil)
	if d := time.Since(t0); d < 90*time.Millisecond {
		t.Fatalf("slow list took %v", d)
	}
	srv.SetListFault(agent, lettasim.ListFault{})
	// Sim-wide list fault, with a chosen status.
	srv.SetListFault("", lettasim.ListFault{Fail: 1, FailStatus: 502})
	if st, _, _ := call(t, srv, "GET", "/v1/runs/?agent_id="+agent, nil); st != 502 {
		t.Fatalf("global list fault: %d", st)
	}
	// The same through a directive.
	_, _, _ = streamTurn(t, srv, agent, turnReq{Text: "[[sim fail_list=1]]"})
	if st, _, _ := call(t, srv, "GET", "/v1/agents/"+agent+"/messages", nil); st != 503 {
		t.Fatalf("directive fail_list: %d", st)
	}
	if st, _, _ := call(t, srv, "GET", "/v1/agents/"+agent+"/messages", nil); st != 200 {
		t.Fatalf("after fail_list: %d", st)
	}
}

// Directive faults apply to the first attempt(s) with an otid, so a client's retry with the same
// otid gets through, as it would after a transient failure.
func TestDirectiveFaultsPerOtid(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("directive", nil)
	path := "/v1/agents/" + agent + "/messages/stream"
	body := turnReq{Text: "[[sim status=500]] hi", Otid: "otid-d1"}.body()
	if st, _, _ := call(t, srv, "POST", path, body); st != 500 {
		t.Fatalf("first attempt %d", st)
	}
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim status=500]] hi", Otid: "otid-d1"}); err != nil {
		t.Fatal(err)
	}
	if n := srv.CountOtid("otid-d1"); n != 1 {
		t.Fatalf("CountOtid %d", n)
	}
	// times=2 and times=always.
	for i, want := range []int{429, 429, 200} {
		st, hdr, _ := call(t, srv, "POST", path, turnReq{Text: "[[sim status=429 retry_after=2000s times=2]]", Otid: "otid-d2"}.body())
		if st != want {
			t.Fatalf("times=2 attempt %d: %d", i, st)
		}
		if st == 429 && hdr.Get("Retry-After") != "2" {
			t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
		}
	}
	for i := 0; i < 3; i++ {
		if st, _, _ := call(t, srv, "POST", path, turnReq{Text: "[[sim status=503 times=always]]", Otid: "otid-d3"}.body()); st != 503 {
			t.Fatalf("times=always attempt %d: %d", i, st)
		}
	}
	// The example of the brief: think, a tool, a stall right after the headers, then a cut
	// after 3 events. The run goes on and completes.
	resp := do(t, srv, "POST", path, turnReq{Text: "[[sim think=180s tool=web_search disconnect_after=3 stall=60s]] search", Otid: "otid-d4"}.body(), nil)
	t0 := time.Now()
	evs, err := newSSE(t, resp.Body).all()
	resp.Body.Close()
	if err == nil || len(evs) != 3 || time.Since(t0) < 50*time.Millisecond {
		t.Fatalf("want a stall then a cut after 3 events: %v %v", types(evs), err)
	}
	rec, err := srv.WaitOtid(testCtx(t), "otid-d4")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.WaitRunDone(testCtx(t), rec.RunID); err != nil {
		t.Fatal(err)
	}
	if info, _ := srv.Run(rec.RunID); info.Status != "completed" || info.TTFT < 150*time.Millisecond {
		t.Fatalf("run %+v", info)
	}
	var msgs []map[string]any
	getJSON(t, srv, "/v1/runs/"+rec.RunID+"/messages", &msgs)
	var got []string
	for _, m := range msgs {
		got = append(got, m["message_type"].(string))
	}
	want := []string{"user_message", "reasoning_message", "tool_call_message", "tool_return_message", "reasoning_message", "assistant_message"}
	if !eqStrings(got, want) || msgs[5]["content"] != "you said: search" {
		t.Fatalf("run messages %v", got)
	}
	// Quoted values, answer override, bare flags.
	_, evs, err = streamTurn(t, srv, agent, turnReq{Text: `[[sim answer="a \"quoted\" answer" tokens]]`})
	if err != nil {
		t.Fatal(err)
	}
	var answer string
	for _, e := range evs {
		if e.typ() == "assistant_message" {
			answer += e.str("content")
		}
	}
	if answer != `a "quoted" answer` {
		t.Fatalf("answer %q", answer)
	}
	for _, bad := range []string{"[[sim think=soon]]", "[[sim status=404]]", "[[sim end=nope]]", "[[sim answer=\"open]]", "[[sim think=1s"} {
		st, _, data := call(t, srv, "POST", path, turnReq{Text: bad}.body())
		if st != 422 {
			t.Errorf("%s: %d %s", bad, st, data)
		}
	}
}

// Letta ends a stream that has sent only pings for too long (1800s), without [DONE]; the run
// is not affected.
func TestPingOnlyLimit(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 5 * time.Millisecond, PingOnlyLimit: 40 * time.Millisecond})
	agent := srv.CreateAgent("ping-only", slowAnswer(time.Hour))
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "x"})
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.typ() != "ping" {
		t.Fatalf("want a stream of pings that just ends: %v", types(evs))
	}
	runID := evs[0].str("run_id")
	if info, _ := srv.Run(runID); info.Status != "running" {
		t.Fatalf("run %+v", info)
	}
	if !srv.Cancel(testCtx(t), runID) {
		t.Fatal("cancel")
	}
}

// busyBody checks a 409 "conversation busy" body and returns the run it names.
func busyBody(t *testing.T, data []byte) string {
	t.Helper()
	var m struct {
		Detail struct {
			Message string `json:"message"`
			RunID   string `json:"run_id"`
		} `json:"detail"`
	}
	if err := json.Unmarshal(data, &m); err != nil || !strings.HasPrefix(m.Detail.Message, "CONVERSATION_BUSY") ||
		!strings.HasPrefix(m.Detail.RunID, "run-") {
		t.Fatalf(`busy body must be {"detail": {"message": "CONVERSATION_BUSY: …", "run_id": "run-…"}}: %s (%v)`, data, err)
	}
	return m.Detail.RunID
}

// With OneRunPerAgent a send while the agent runs is refused with 409 naming the running run,
// and nothing is stored; once the run ends the same message goes through. Other agents are
// not affected.
func TestOneRunPerAgentBusy(t *testing.T) {
	srv := newServer(t, lettasim.Config{OneRunPerAgent: true})
	agent := srv.CreateAgent("busy", slowAnswer(50*time.Second))
	other := srv.CreateAgent("free", nil)
	first := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", turnReq{Text: "first", Otid: "otid-first"}.body(), nil)
	defer first.Body.Close()
	if first.StatusCode != 200 {
		t.Fatalf("first send: %d", first.StatusCode)
	}
	runID := srv.Runs(agent)[0].ID
	path := "/v1/agents/" + agent + "/messages/stream"
	st, _, data := call(t, srv, "POST", path, turnReq{Text: "second", Otid: "otid-second"}.body())
	if st != http.StatusConflict {
		t.Fatalf("second send while running: status %d: %s", st, data)
	}
	if got := busyBody(t, data); got != runID {
		t.Fatalf("busy names %q, want the running %q", got, runID)
	}
	if srv.CountOtid("otid-second") != 0 || len(srv.Runs(agent)) != 1 {
		t.Fatal("a busy answer stored something")
	}
	if _, _, err := streamTurn(t, srv, other, turnReq{Text: "elsewhere", Otid: "otid-other"}); err != nil {
		t.Fatalf("another agent is not busy: %v", err)
	}
	if err := srv.WaitRunDone(testCtx(t), runID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "second", Otid: "otid-second"}); err != nil {
		t.Fatal(err)
	}
	if srv.CountOtid("otid-second") != 1 {
		t.Fatal("want the retried message stored once")
	}
}

// The busy directive refuses the first attempt of an otid with 409, storing nothing.
func TestBusyDirective(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("busy-directive", nil)
	path := "/v1/agents/" + agent + "/messages/stream"
	st, _, data := call(t, srv, "POST", path, turnReq{Text: "[[sim busy]] hi", Otid: "otid-busy"}.body())
	if st != http.StatusConflict {
		t.Fatalf("status %d: %s", st, data)
	}
	busyBody(t, data)
	if srv.CountOtid("otid-busy") != 0 {
		t.Fatal("a busy answer stored something")
	}
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim busy]] hi", Otid: "otid-busy"}); err != nil {
		t.Fatal(err)
	}
	if srv.CountOtid("otid-busy") != 1 {
		t.Fatal("want the second attempt stored once")
	}
}
