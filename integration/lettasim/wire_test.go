package lettasim_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// The raw bytes of a default turn: framing, order, ids, otids, run_id, seq_id null.
func TestStreamFramingAndOrder(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("framing", nil)
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream",
		turnReq{Text: "hello there", Otid: "otid-framing-1"}.body(), nil)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	// Byte-level: every event is "data: <compact json>\n\n"; no id:, retry: or comment lines.
	if !strings.HasSuffix(string(raw), "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with data: [DONE]: %q", raw)
	}
	for _, chunk := range strings.Split(strings.TrimSuffix(string(raw), "\n\n"), "\n\n") {
		if !strings.HasPrefix(chunk, "data: ") || strings.Contains(chunk, "\n") {
			t.Fatalf("bad SSE event %q", chunk)
		}
		payload := strings.TrimPrefix(chunk, "data: ")
		if payload != "[DONE]" && strings.Contains(payload, `": `) {
			t.Errorf("payload is not compact JSON: %s", payload)
		}
	}
	evs, err := newSSE(t, strings.NewReader(string(raw))).all()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"ping", "reasoning_message", "assistant_message", "stop_reason", "usage_statistics", "[DONE]"}
	if got := types(evs); !eqStrings(got, want) {
		t.Fatalf("events %v, want %v", got, want)
	}
	runID := evs[0].str("run_id")
	if !strings.HasPrefix(runID, "run-") || !strings.HasPrefix(evs[0].str("id"), "ping-") {
		t.Fatalf("first ping must carry run_id and a ping- id: %s", evs[0].Data)
	}
	reasoning, answer := evs[1], evs[2]
	if reasoning.str("id") != answer.str("id") || !strings.HasPrefix(answer.str("id"), "message-") {
		t.Errorf("reasoning and assistant of one step must share a message- id: %s / %s", reasoning.str("id"), answer.str("id"))
	}
	if reasoning.str("otid") == answer.str("otid") || answer.str("otid") == "" {
		t.Errorf("reasoning and assistant must differ in otid")
	}
	if got := answer.str("content"); got != "you said: hello there" {
		t.Errorf("answer %q", got)
	}
	for _, e := range evs[:5] {
		conformEvent(t, e)
		if e.typ() != "stop_reason" && e.typ() != "usage_statistics" && e.str("run_id") != runID {
			t.Errorf("%s without run_id %s", e.typ(), runID)
		}
		if e.seq() != -1 {
			t.Errorf("foreground %s has seq_id %d, want null", e.typ(), e.seq())
		}
	}
	// Common fields in wire order, nulls written out.
	wantPrefix := `{"id":"` + answer.str("id") + `","date":"`
	if !strings.HasPrefix(answer.Data, wantPrefix) {
		t.Errorf("assistant message does not start with id, date: %s", answer.Data)
	}
	order := []string{`"id"`, `"date"`, `"name":null`, `"message_type"`, `"otid"`, `"sender_id":null`, `"step_id"`, `"is_err":null`, `"seq_id":null`, `"run_id"`, `"content"`}
	last := -1
	for _, k := range order {
		i := strings.Index(answer.Data, k)
		if i <= last {
			t.Fatalf("field %s out of order in %s", k, answer.Data)
		}
		last = i
	}
	if st := evs[3].str("stop_reason"); st != "end_turn" {
		t.Errorf("stop_reason %q", st)
	}

	// The user message is stored with the client's otid and the run it started.
	if err := srv.WaitRunDone(testCtx(t), runID); err != nil {
		t.Fatal(err)
	}
	um := srv.UserMessages(agent)
	if len(um) != 1 || um[0].Otid != "otid-framing-1" || um[0].RunID != runID || um[0].Text != "hello there" || um[0].SenderID != "user-test" {
		t.Fatalf("user messages %+v", um)
	}
	if n := srv.CountOtid("otid-framing-1"); n != 1 {
		t.Fatalf("CountOtid %d", n)
	}
	runs := srv.Runs(agent)
	if len(runs) != 1 || runs[0].Status != "completed" || runs[0].StopReason != "end_turn" || runs[0].Otid != "otid-framing-1" || runs[0].Ended.IsZero() {
		t.Fatalf("runs %+v", runs)
	}
	// Every stored message carries the run_id.
	for _, m := range srv.History(agent) {
		if m.RunID != runID {
			t.Errorf("stored %s without run_id", m.Type)
		}
	}
}

func TestOtidMintedWhenMissing(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("mint", nil)
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "no otid"})
	if err != nil {
		t.Fatal(err)
	}
	um := srv.UserMessages(agent)
	if len(um) != 1 || um[0].Otid == "" || um[0].RunID != evs[0].str("run_id") {
		t.Fatalf("user messages %+v", um)
	}
}

func TestInputSugarAndContentParts(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("input", nil)
	resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", map[string]any{"input": "via input"}, nil)
	evs, err := newSSE(t, resp.Body).all()
	resp.Body.Close()
	if err != nil || len(evs) < 3 || evs[2].str("content") != "you said: via input" {
		t.Fatalf("input turn: %v %v", types(evs), err)
	}
	_, evs, err = streamTurn(t, srv, agent, turnReq{Text: "as parts", Parts: true, Otid: "otid-parts"})
	if err != nil {
		t.Fatal(err)
	}
	if got := evs[2].str("content"); got != "you said: as parts" {
		t.Fatalf("answer %q", got)
	}
	var list []map[string]any
	data := getJSON(t, srv, "/v1/agents/"+agent+"/messages?order=asc", &list)
	conformMessages(t, data)
	var found bool
	for _, m := range list {
		if m["otid"] == "otid-parts" {
			found = true
			parts, ok := m["content"].([]any)
			if !ok || len(parts) != 1 || parts[0].(map[string]any)["text"] != "as parts" {
				t.Errorf("content parts not kept: %v", m["content"])
			}
		}
	}
	if !found {
		t.Fatal("user message with parts not listed")
	}
}

func TestValidationErrors(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("validation", nil)
	path := "/v1/agents/" + agent + "/messages/stream"
	for name, body := range map[string]any{
		"both":      map[string]any{"input": "x", "messages": []any{map[string]any{"role": "user", "content": "x"}}},
		"neither":   map[string]any{"stream_tokens": true},
		"empty":     map[string]any{"messages": []any{}},
		"bad role":  map[string]any{"messages": []any{map[string]any{"role": "tool", "content": "x"}}},
		"not json":  "{",
		"max_steps": map[string]any{"input": "x", "max_steps": 0},
	} {
		st, _, data := call(t, srv, "POST", path, body)
		if st != 422 {
			t.Errorf("%s: status %d, want 422: %s", name, st, data)
			continue
		}
		conform(t, "HTTPValidationError", data)
	}
	if len(srv.UserMessages(agent)) != 0 || len(srv.Runs(agent)) != 0 {
		t.Fatal("an invalid request stored something")
	}
	// Unknown agent: 404 {"detail": ...}; unknown route: 404 too.
	st, _, data := call(t, srv, "POST", "/v1/agents/agent-00000000-0000-4000-8000-000000000000/messages/stream", turnReq{Text: "x"}.body())
	if st != 404 || !strings.Contains(detail(t, data), "not found") {
		t.Fatalf("unknown agent: %d %s", st, data)
	}
	st, _, data = call(t, srv, "GET", "/v1/agents/agent-00000000-0000-4000-8000-000000000000", nil)
	if st != 404 {
		t.Fatalf("unknown agent GET: %d", st)
	}
	detail(t, data)
	// A malformed agent id is refused by the path pattern, as Letta refuses it: 422.
	for _, p := range []string{"/v1/agents/agent-nope", "/v1/agents/agent-demo/messages", "/v1/agents/agent-demo/messages/stream"} {
		method := "GET"
		var body any
		if strings.HasSuffix(p, "stream") {
			method, body = "POST", turnReq{Text: "x"}.body()
		}
		st, _, data = call(t, srv, method, p, body)
		if st != 422 {
			t.Fatalf("%s %s: %d %s", method, p, st, data)
		}
		conform(t, "HTTPValidationError", data)
	}
	st, _, data = call(t, srv, "GET", "/v1/nothing-here", nil)
	if st != 404 {
		t.Fatalf("unknown route: %d", st)
	}
	detail(t, data)
	st, _, data = call(t, srv, "GET", "/v1/runs/run-nope", nil)
	if st != 404 {
		t.Fatalf("unknown run: %d", st)
	}
	detail(t, data)
	// An unknown directive key is a 422 that says why.
	st, _, data = call(t, srv, "POST", path, turnReq{Text: "[[sim bogus=1]]"}.body())
	if st != 422 || !strings.Contains(detail(t, data), "bogus") {
		t.Fatalf("bad directive: %d %s", st, data)
	}
}

func TestAuth(t *testing.T) {
	srv := newServer(t, lettasim.Config{APIKey: "sekret"})
	agent := srv.CreateAgent("auth", nil)
	st, _, data := call(t, srv, "GET", "/v1/agents/"+agent, nil)
	if st != 401 {
		t.Fatalf("no key: %d", st)
	}
	detail(t, data)
	resp := do(t, srv, "GET", "/v1/agents/"+agent, nil, map[string]string{"Authorization": "Bearer wrong"})
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Fatalf("wrong key: %d", resp.StatusCode)
	}
	resp = do(t, srv, "GET", "/v1/agents/"+agent, nil, map[string]string{"Authorization": "Bearer sekret"})
	data, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("right key: %d", resp.StatusCode)
	}
	conform(t, "AgentState", data)
	st, _, data = call(t, srv, "GET", "/v1/health/", nil)
	if st != 200 {
		t.Fatalf("health needs no key: %d", st)
	}
	conform(t, "Health", data)
}

// The User-Agent trap of POST /messages with streaming=true.
func TestUserAgentTrap(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("ua", nil)
	body := turnReq{Text: "ua", Extra: map[string]any{"streaming": true}}.body()
	path := "/v1/agents/" + agent + "/messages"

	resp := do(t, srv, "POST", path, body, nil) // Go-http-client/1.1
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 422 || !strings.Contains(detail(t, data), "SDK v1.0+") {
		t.Fatalf("Go user agent: %d %s", resp.StatusCode, data)
	}
	if len(srv.UserMessages(agent)) != 0 {
		t.Fatal("trapped request stored a message")
	}
	for name, hdr := range map[string]map[string]string{
		"stainless header": {"X-Stainless-Package-Version": "1.0.0"},
		"letta-client/1.x": {"User-Agent": "letta-client/1.3.2"},
		"no user agent":    {"User-Agent": ""},
	} {
		resp := do(t, srv, "POST", path, body, hdr)
		evs, err := newSSE(t, resp.Body).all()
		resp.Body.Close()
		if resp.StatusCode != 200 || err != nil || types(evs)[len(evs)-1] != "[DONE]" {
			t.Errorf("%s: %d %v %v", name, resp.StatusCode, types(evs), err)
		}
	}
	// The older /messages/stream does not check.
	if _, _, err := streamTurn(t, srv, agent, turnReq{Text: "ua"}); err != nil {
		t.Fatal(err)
	}
	// letta-client/0.x is refused.
	resp = do(t, srv, "POST", path, body, map[string]string{"User-Agent": "letta-client/0.9"})
	resp.Body.Close()
	if resp.StatusCode != 422 {
		t.Fatalf("old SDK: %d", resp.StatusCode)
	}
}

func TestNonStreamingSend(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("sync", nil)
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages", turnReq{Text: "sync hi", Otid: "otid-sync"}.body())
	if st != 200 {
		t.Fatalf("%d %s", st, data)
	}
	conform(t, "LettaResponse", data)
	var lr struct {
		Messages []map[string]any `json:"messages"`
		Stop     map[string]any   `json:"stop_reason"`
		Usage    map[string]any   `json:"usage"`
	}
	if err := json.Unmarshal(data, &lr); err != nil {
		t.Fatal(err)
	}
	if len(lr.Messages) != 2 || lr.Messages[1]["content"] != "you said: sync hi" || lr.Stop["stop_reason"] != "end_turn" {
		t.Fatalf("LettaResponse %s", data)
	}
	if srv.CountOtid("otid-sync") != 1 {
		t.Fatal("not stored")
	}
}

func TestAsyncRun(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("async", nil)
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "[[sim think=50s]] later", Otid: "otid-async"}.body())
	if st != 200 {
		t.Fatalf("%d %s", st, data)
	}
	conform(t, "Run", data)
	var run map[string]any
	_ = json.Unmarshal(data, &run)
	id, _ := run["id"].(string)
	if run["status"] != "created" && run["status"] != "running" {
		t.Fatalf("async run status %v", run["status"])
	}
	if err := srv.WaitRunDone(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	data = getJSON(t, srv, "/v1/runs/"+id, &run)
	conform(t, "Run", data)
	if run["status"] != "completed" || run["stop_reason"] != "end_turn" || run["completed_at"] == nil ||
		run["conversation_id"] != nil || run["total_duration_ns"] == nil || run["ttft_ns"] == nil {
		t.Fatalf("run %s", data)
	}
	// Async runs report completed for a failing stop reason (judge by stop_reason).
	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "[[sim end=llm_api_error]]"}.body())
	if st != 200 {
		t.Fatalf("%d %s", st, data)
	}
	_ = json.Unmarshal(data, &run)
	id, _ = run["id"].(string)
	if err := srv.WaitRunDone(testCtx(t), id); err != nil {
		t.Fatal(err)
	}
	getJSON(t, srv, "/v1/runs/"+id, &run)
	if run["status"] != "completed" || run["stop_reason"] != "llm_api_error" {
		t.Fatalf("async failing run: %v", run)
	}
}

// Pings flow while a step thinks, carry run_id, and (background) the last seq_id.
func TestPingsWhileThinking(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 5 * time.Millisecond})
	agent := srv.CreateAgent("pings", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "hmm"},
		{Kind: lettasim.Assistant, Text: "done", Delay: 100 * time.Second}, // 100ms at scale 0.001
	}})
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "think", Background: true})
	if err != nil {
		t.Fatal(err)
	}
	runID := evs[0].str("run_id")
	var pingsAfterReasoning int
	seenReasoning := false
	for _, e := range evs {
		conformEvent(t, e)
		switch e.typ() {
		case "reasoning_message":
			seenReasoning = true
		case "ping":
			if e.str("run_id") != runID {
				t.Errorf("ping without run_id: %s", e.Data)
			}
			if seenReasoning {
				pingsAfterReasoning++
				if e.seq() != 1 {
					t.Errorf("ping after chunk 1 has seq_id %d", e.seq())
				}
			} else if e.seq() != 0 {
				t.Errorf("first ping seq_id %d", e.seq())
			}
		}
	}
	if pingsAfterReasoning < 2 {
		t.Fatalf("want pings while thinking, got %d: %v", pingsAfterReasoning, types(evs))
	}
	// include_pings:false sends none, not even the first.
	_, evs, err = streamTurn(t, srv, agent, turnReq{Text: "quiet", NoPings: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.typ() == "ping" {
			t.Fatal("ping with include_pings:false")
		}
	}
}

func TestTokenMode(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("tokens", &lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I will look this up with a search tool now"},
		{Kind: lettasim.ToolCall, ToolName: "web_search", Arguments: `{"query": "letta streaming tokens"}`},
		{Kind: lettasim.ToolReturn, Text: "found it"},
		{Kind: lettasim.Reasoning, Text: "Good, now I can answer the question"},
		{Kind: lettasim.Assistant, Text: "Here is a longer answer made of many words to split into tokens"},
	}})
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	// Join deltas by (id, message_type).
	type key struct{ id, typ string }
	joined := map[key]string{}
	counts := map[key]int{}
	var callDeltas []map[string]any
	for _, e := range evs {
		conformEvent(t, e)
		switch e.typ() {
		case "reasoning_message":
			k := key{e.str("id"), e.typ()}
			joined[k] += e.str("reasoning")
			counts[k]++
		case "assistant_message":
			k := key{e.str("id"), e.typ()}
			joined[k] += e.str("content")
			counts[k]++
		case "tool_call_message":
			tc := e.field("tool_call").(map[string]any)
			callDeltas = append(callDeltas, tc)
			if tcs, ok := e.field("tool_calls").(map[string]any); !ok || len(tcs) != len(tc) {
				t.Errorf("tool_calls must be the same delta object: %s", e.Data)
			}
		}
	}
	for k, n := range counts {
		if n < 2 {
			t.Errorf("%v came in %d chunk(s), want several deltas", k, n)
		}
	}
	// Tool call deltas drop null keys: {name, tool_call_id} then {arguments, tool_call_id}...
	if len(callDeltas) < 2 {
		t.Fatalf("tool call deltas %v", callDeltas)
	}
	if _, ok := callDeltas[0]["arguments"]; ok || callDeltas[0]["name"] != "web_search" || callDeltas[0]["tool_call_id"] == nil {
		t.Errorf("first tool call delta %v", callDeltas[0])
	}
	var args string
	for _, d := range callDeltas[1:] {
		if _, ok := d["name"]; ok || d["tool_call_id"] != callDeltas[0]["tool_call_id"] {
			t.Errorf("argument delta %v", d)
		}
		args += d["arguments"].(string)
	}
	if args != `{"query": "letta streaming tokens"}` {
		t.Errorf("joined arguments %q", args)
	}
	// The history holds the joined text.
	hist := srv.History(agent)
	for _, m := range hist {
		switch m.Type {
		case "reasoning_message", "assistant_message":
			if joined[key{m.ID, m.Type}] != m.Text {
				t.Errorf("%s joined %q, stored %q", m.Type, joined[key{m.ID, m.Type}], m.Text)
			}
		}
	}
	// stream_tokens:true in the request turns token mode on for a step-mode script.
	plain := srv.CreateAgent("plain", nil)
	_, evs, _ = streamTurn(t, srv, plain, turnReq{Text: "one two three four five six", StreamTokens: true})
	n := 0
	for _, e := range evs {
		if e.typ() == "assistant_message" {
			n++
		}
	}
	if n < 2 {
		t.Fatalf("stream_tokens did not stream deltas: %v", types(evs))
	}
}

// A tool-using turn: grouping by id, pairing by tool_call_id.
func TestToolTurnGrouping(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("tools", nil)
	_, evs, err := streamTurn(t, srv, agent, turnReq{Text: "[[sim tool=web_search,fetch_page]] find it"})
	if err != nil {
		t.Fatal(err)
	}
	evs = withoutPings(evs)
	want := []string{"reasoning_message", "tool_call_message", "tool_return_message",
		"reasoning_message", "tool_call_message", "tool_return_message",
		"reasoning_message", "assistant_message", "stop_reason", "usage_statistics", "[DONE]"}
	if got := types(evs); !eqStrings(got, want) {
		t.Fatalf("events %v", got)
	}
	for i := 0; i < 6; i += 3 {
		r, c, ret := evs[i], evs[i+1], evs[i+2]
		if r.str("id") != c.str("id") || ret.str("id") == c.str("id") {
			t.Errorf("step %d: reasoning/call share id, return has its own", i/3)
		}
		tc := c.field("tool_call").(map[string]any)
		if ret.str("tool_call_id") != tc["tool_call_id"] || ret.str("name") != tc["name"] || ret.str("status") != "success" {
			t.Errorf("tool return does not pair with call: %s / %s", c.Data, ret.Data)
		}
	}
	if evs[7].str("content") != "you said: find it" {
		t.Errorf("echo must drop the directive: %q", evs[7].str("content"))
	}
}
