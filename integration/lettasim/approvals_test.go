package lettasim_test

import (
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// requestedCalls returns the tool calls (id, name) of the approval_request_message in evs.
func requestedCalls(t *testing.T, evs []event) []lettasim.ToolCallInfo {
	t.Helper()
	for _, e := range evs {
		if e.typ() != "approval_request_message" {
			continue
		}
		var m struct {
			ToolCalls []struct {
				Name, Arguments string
				ToolCallID      string `json:"tool_call_id"`
			} `json:"tool_calls"`
		}
		if err := json.Unmarshal([]byte(e.Data), &m); err != nil {
			t.Fatal(err)
		}
		var out []lettasim.ToolCallInfo
		for _, c := range m.ToolCalls {
			out = append(out, lettasim.ToolCallInfo{ID: c.ToolCallID, Name: c.Name, Arguments: c.Arguments})
		}
		return out
	}
	t.Fatalf("no approval_request_message in %v", types(evs))
	return nil
}

// answers approves (or denies, with reason) each call.
func answers(calls []lettasim.ToolCallInfo, approve bool, reason string) []any {
	out := make([]any, 0, len(calls))
	for _, c := range calls {
		a := map[string]any{"type": "approval", "tool_call_id": c.ID, "approve": approve}
		if reason != "" {
			a["reason"] = reason
		}
		out = append(out, a)
	}
	return out
}

// byType returns the events of one message_type.
func byType(evs []event, typ string) []event {
	var out []event
	for _, e := range evs {
		if e.typ() == typ {
			out = append(out, e)
		}
	}
	return out
}

// threadPaths are the three ways to reach a thread: a conversation, the agent's default thread
// through the conversation endpoints, and the agent endpoints (which share the default thread's
// approval state).
type threadPath struct {
	name   string
	path   string // the send endpoint
	convID string // for PendingApproval: "conv-…" or ""
	extra  map[string]any
}

func threadPaths(t *testing.T, srv *lettasim.Server, agent string) []threadPath {
	conv := createConv(t, srv, agent)
	return []threadPath{
		{name: "conversation", path: convPath(conv), convID: conv},
		{name: "default", path: convPath("default"), extra: map[string]any{"agent_id": agent}},
		{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"},
	}
}

func (tp threadPath) req(tr turnReq) turnReq {
	if tp.extra != nil {
		tr.Extra = map[string]any{}
		for k, v := range tp.extra {
			tr.Extra[k] = v
		}
	}
	return tr
}

// send posts a streaming send and reads the whole stream (status checked by the caller).
func (tp threadPath) send(t *testing.T, srv *lettasim.Server, tr turnReq) (int, []event, []byte) {
	t.Helper()
	resp := do(t, srv, "POST", tp.path, tp.req(tr).body(), nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, nil, data
	}
	evs, err := newSSE(t, resp.Body).all()
	if err != nil {
		t.Fatal(err)
	}
	return 200, evs, nil
}

func (tp threadPath) mustSend(t *testing.T, srv *lettasim.Server, tr turnReq) []event {
	t.Helper()
	st, evs, data := tp.send(t, srv, tr)
	if st != 200 {
		t.Fatalf("%s: send: %d %s", tp.name, st, data)
	}
	for _, e := range evs {
		conformEvent(t, e)
	}
	conformBody(t, "ConversationMessageRequest", tp.req(tr).body())
	return withoutPings(evs)
}

// A run that ends requires_approval leaves its thread waiting: a new user message is refused
// with 409 (nothing stored) on a conversation, the default thread and the agent endpoints,
// until the approval is answered; other threads are not blocked.
func TestApprovalPendingBlocks(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	for _, tp := range threadPaths(t, srv, agent) {
		t.Run(tp.name, func(t *testing.T) {
			evs := tp.mustSend(t, srv, turnReq{Text: "[[sim approval=send_email]] mail bob"})
			if got := evs[len(evs)-3].str("stop_reason"); got != "requires_approval" {
				t.Fatalf("stop %q", got)
			}
			calls := requestedCalls(t, evs)
			pend, ok := srv.PendingApproval(agent, tp.convID)
			if !ok || len(pend.Calls) != 1 || pend.Calls[0].ID != calls[0].ID || pend.Calls[0].Name != "send_email" ||
				pend.RunID != evs[0].str("run_id") || pend.RequestID != evs[1].str("id") {
				t.Fatalf("pending %+v %v", pend, ok)
			}
			before := len(srv.UserMessages(agent))
			st, _, data := tp.send(t, srv, turnReq{Text: "hello?", Otid: "otid-blocked-" + tp.name})
			if st != 409 || !strings.HasPrefix(detail(t, data), "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call.") {
				t.Fatalf("blocked send: %d %s", st, data)
			}
			if n := srv.CountOtid("otid-blocked-" + tp.name); n != 0 || len(srv.UserMessages(agent)) != before {
				t.Fatalf("a refused message was stored (%d)", n)
			}
			// The answer unblocks the thread.
			tp.mustSend(t, srv, turnReq{Approvals: answers(calls, true, "")})
			if _, ok := srv.PendingApproval(agent, tp.convID); ok {
				t.Fatal("still pending after the answer")
			}
			tp.mustSend(t, srv, turnReq{Text: "hello again"})
		})
	}
	// A pending approval of a conversation does not block another conversation.
	a, b := createConv(t, srv, agent), createConv(t, srv, agent)
	convStream(t, srv, a, turnReq{Text: "[[sim approval=x]] go"})
	convStream(t, srv, b, turnReq{Text: "unrelated"})
	convStream(t, srv, "default", turnReq{Text: "[[sim approval=y]] go", Extra: map[string]any{"agent_id": agent}})
	all := srv.PendingApprovals(agent)
	if len(all) != 2 || all[0].ConversationID != "default" || all[0].Calls[0].Name != "y" ||
		all[1].ConversationID != a || all[1].Calls[0].Name != "x" {
		t.Fatalf("PendingApprovals %+v", all)
	}
}

// An approved call runs: the approval's own run streams the approval_response_message, the
// tool's return and the rest of the script, and the answer is in every history.
func TestApprovalApproveContinues(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	conv := createConv(t, srv, agent)
	tp := threadPath{name: "conversation", path: convPath(conv), convID: conv}
	first := tp.mustSend(t, srv, turnReq{Text: "[[sim approval=send_email answer=\"Mail sent.\"]] mail bob"})
	calls := requestedCalls(t, first)
	evs := tp.mustSend(t, srv, turnReq{Otid: "otid-approve", Approvals: answers(calls, true, "fine")})
	want := []string{"approval_response_message", "tool_return_message", "reasoning_message", "assistant_message",
		"stop_reason", "usage_statistics", "[DONE]"}
	if got := types(evs); !eqStrings(got, want) {
		t.Fatalf("approval stream %v", got)
	}
	runID := evs[0].str("run_id")
	if runID == "" || runID == first[0].str("run_id") {
		t.Fatalf("the approval needs a run of its own: %q", runID)
	}
	if evs[0].str("otid") != "otid-approve" {
		t.Fatalf("approval response otid %q", evs[0].str("otid"))
	}
	tr := evs[1]
	if tr.str("tool_call_id") != calls[0].ID || tr.str("status") != "success" || tr.str("name") != "send_email" {
		t.Fatalf("tool return %s", tr.Data)
	}
	if got := evs[3].str("content"); got != "Mail sent." {
		t.Fatalf("answer %q", got)
	}
	if evs[4].str("stop_reason") != "end_turn" {
		t.Fatal(evs[4].Data)
	}
	// Recorded: counts per otid, the Go view, and the lists (conversation and run).
	if n := srv.CountOtid("otid-approve"); n != 1 {
		t.Fatalf("CountOtid %d", n)
	}
	am := srv.ApprovalMessages(agent)
	if len(am) != 1 || am[0].Otid != "otid-approve" || am[0].RunID != runID || am[0].ConversationID != conv ||
		len(am[0].Approvals) != 1 || !am[0].Approvals[0].Approve || am[0].Approvals[0].ToolCallID != calls[0].ID {
		t.Fatalf("ApprovalMessages %+v", am)
	}
	for _, path := range []string{"/v1/conversations/" + conv + "/messages?order=asc", "/v1/runs/" + runID + "/messages"} {
		var found bool
		for _, m := range conformMessages(t, getJSON(t, srv, path, nil)) {
			if m["message_type"] == "approval_response_message" {
				found = true
				ap := m["approvals"].([]any)[0].(map[string]any)
				if m["otid"] != "otid-approve" || ap["tool_call_id"] != calls[0].ID || ap["approve"] != true || ap["reason"] != "fine" {
					t.Fatalf("%s: %v", path, m)
				}
			}
		}
		if !found {
			t.Fatalf("%s lists no approval_response_message", path)
		}
	}
	if info, _ := srv.Run(runID); info.Otid != "otid-approve" || info.StopReason != "end_turn" || info.ConversationID != conv {
		t.Fatalf("run %+v", info)
	}

	// On the agent endpoints the agent's history holds it too, and History reports it.
	agentTP := threadPath{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"}
	calls = requestedCalls(t, agentTP.mustSend(t, srv, turnReq{Text: "[[sim approval=rm]] clean"}))
	agentTP.mustSend(t, srv, turnReq{Approvals: answers(calls, true, "")})
	var seen bool
	for _, m := range srv.History(agent) {
		if m.Type == "approval_response_message" && len(m.Approvals) == 1 && m.Approvals[0].ToolCallID == calls[0].ID {
			seen = true
		}
	}
	if !seen {
		t.Fatal("History has no approval_response_message")
	}
	var listed bool
	for _, m := range conformMessages(t, getJSON(t, srv, "/v1/agents/"+agent+"/messages", nil)) {
		listed = listed || m["message_type"] == "approval_response_message"
	}
	if !listed {
		t.Fatal("the agent's list has no approval_response_message")
	}
}

// A denied call is reported to the model: a tool return with status error carrying the
// reason, then an answer about the denial (the script's own answer is not given).
func TestApprovalDenyReported(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	tp := threadPath{name: "default", path: convPath("default"), extra: map[string]any{"agent_id": agent}}
	calls := requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=send_email answer=\"Mail sent.\"]] mail bob"}))
	evs := tp.mustSend(t, srv, turnReq{Approvals: answers(calls, false, "not now")})
	rets := byType(evs, "tool_return_message")
	if len(rets) != 1 || rets[0].str("status") != "error" || !strings.Contains(rets[0].str("tool_return"), "denied") ||
		!strings.Contains(rets[0].str("tool_return"), "not now") || rets[0].str("tool_call_id") != calls[0].ID {
		t.Fatalf("denial return %v", rets)
	}
	ans := byType(evs, "assistant_message")
	if len(ans) != 1 || !strings.Contains(ans[0].str("content"), "denied") || !strings.Contains(ans[0].str("content"), "not now") ||
		strings.Contains(ans[0].str("content"), "Mail sent") {
		t.Fatalf("answer %v", ans)
	}
	am := srv.ApprovalMessages(agent)
	if len(am) != 1 || am[0].Approvals[0].Approve || am[0].Approvals[0].Reason != "not now" {
		t.Fatalf("%+v", am)
	}
}

// Several calls in one step are named by one approval request and must be answered together:
// a partial answer, an unknown id or a repeated id is a 400 naming the expected and received
// ids, and stores nothing; the full answer (one approved, one denied) runs.
func TestApprovalParallelCalls(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	conv := createConv(t, srv, agent)
	tp := threadPath{name: "conversation", path: convPath(conv), convID: conv}
	evs := tp.mustSend(t, srv, turnReq{Text: "[[sim approval=send_email,delete_file]] do both"})
	if n := len(byType(evs, "approval_request_message")); n != 1 {
		t.Fatalf("%d approval requests", n)
	}
	calls := requestedCalls(t, evs)
	if len(calls) != 2 || calls[0].Name != "send_email" || calls[1].Name != "delete_file" || calls[0].ID == calls[1].ID {
		t.Fatalf("calls %+v", calls)
	}
	if p, _ := srv.PendingApproval(agent, conv); len(p.Calls) != 2 {
		t.Fatalf("pending %+v", p)
	}
	bad := map[string][]any{
		"partial": answers(calls[:1], true, ""),
		"unknown": answers([]lettasim.ToolCallInfo{calls[0], {ID: "call_unknown"}}, true, ""),
		"twice":   answers([]lettasim.ToolCallInfo{calls[0], calls[0]}, true, ""),
	}
	for name, items := range bad {
		st, _, data := tp.send(t, srv, turnReq{Approvals: items})
		d := detail(t, data)
		if st != 400 || !strings.HasPrefix(d, "Invalid tool call IDs. Expected '['"+calls[0].ID+"', '"+calls[1].ID+"']', but received '[") {
			t.Fatalf("%s: %d %s", name, st, data)
		}
		if name == "unknown" && !strings.Contains(d, "call_unknown") {
			t.Fatalf("%s: the detail does not name the unknown id: %s", name, d)
		}
	}
	if n := len(srv.ApprovalMessages(agent)); n != 0 {
		t.Fatalf("a refused approval was stored (%d)", n)
	}
	if _, ok := srv.PendingApproval(agent, conv); !ok {
		t.Fatal("a refused approval cleared the pending request")
	}
	both := []any{answers(calls[1:], false, "keep it")[0], answers(calls[:1], true, "")[0]} // any order
	evs = tp.mustSend(t, srv, turnReq{Approvals: both})
	rets := byType(evs, "tool_return_message")
	if len(rets) != 2 || rets[0].str("tool_call_id") != calls[0].ID || rets[0].str("status") != "success" ||
		rets[1].str("tool_call_id") != calls[1].ID || rets[1].str("status") != "error" {
		t.Fatalf("returns %v", rets)
	}
	if ans := byType(evs, "assistant_message"); len(ans) != 1 || !strings.Contains(ans[0].str("content"), "delete_file") {
		t.Fatalf("answer %v", ans)
	}
	// In token mode the calls stream as deltas, each naming its call.
	evs = tp.mustSend(t, srv, turnReq{Text: "[[sim approval=a,b tokens]] again"})
	ids := map[string]bool{}
	for _, e := range byType(evs, "approval_request_message") {
		var m struct {
			ToolCalls struct {
				ToolCallID string `json:"tool_call_id"`
			} `json:"tool_calls"`
		}
		_ = json.Unmarshal([]byte(e.Data), &m)
		ids[m.ToolCalls.ToolCallID] = true
	}
	if p, _ := srv.PendingApproval(agent, conv); len(ids) != 2 || !ids[p.Calls[0].ID] || !ids[p.Calls[1].ID] {
		t.Fatalf("token-mode deltas name %v, pending %+v", ids, p)
	}
}

// A client-side tool's return answers its call: the run reports the client's value and
// status. The ToolReturnCreate form ({"type":"tool_return","tool_returns":[…]}) does too.
func TestApprovalClientToolReturn(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	tp := threadPath{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"}
	calls := requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=read_screen]] look"}))
	item := map[string]any{"type": "tool", "tool_call_id": calls[0].ID, "tool_return": "a cat", "status": "success"}
	evs := tp.mustSend(t, srv, turnReq{Approvals: []any{item}})
	rets := byType(evs, "tool_return_message")
	if len(rets) != 1 || rets[0].str("tool_return") != "a cat" || rets[0].str("status") != "success" {
		t.Fatalf("returns %v", rets)
	}
	am := srv.ApprovalMessages(agent)
	if len(am) != 1 || !am[0].Approvals[0].ClientReturn || am[0].Approvals[0].Return != "a cat" {
		t.Fatalf("%+v", am)
	}

	calls = requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=read_screen]] again"}))
	body := map[string]any{"messages": []any{map[string]any{"type": "tool_return", "otid": "otid-tr",
		"tool_returns": []any{map[string]any{"tool_call_id": calls[0].ID, "tool_return": "no screen", "status": "error"}}}}}
	conformBody(t, "LettaStreamingRequest", body)
	resp := do(t, srv, "POST", tp.path, body, nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("tool_return: %d", resp.StatusCode)
	}
	evs, err := newSSE(t, resp.Body).all()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		conformEvent(t, e)
	}
	rets = byType(evs, "tool_return_message")
	if len(rets) != 1 || rets[0].str("tool_return") != "no screen" || rets[0].str("status") != "error" || srv.CountOtid("otid-tr") != 1 {
		t.Fatalf("returns %v", rets)
	}
}

// An approval with nothing pending is a 400 with Letta's detail, and stores nothing; so is
// the same approval sent again in the foreground after it was answered.
func TestApprovalNothingPending(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	for _, tp := range threadPaths(t, srv, agent) {
		st, _, data := tp.send(t, srv, turnReq{Otid: "otid-none-" + tp.name,
			Approvals: answers([]lettasim.ToolCallInfo{{ID: "call_x"}}, true, "")})
		if st != 400 || !strings.HasPrefix(detail(t, data), "Cannot process approval response: No tool call is currently awaiting approval.") {
			t.Fatalf("%s: %d %s", tp.name, st, data)
		}
		if srv.CountOtid("otid-none-"+tp.name) != 0 {
			t.Fatalf("%s: stored", tp.name)
		}
	}
	tp := threadPaths(t, srv, agent)[0]
	calls := requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=x]] go"}))
	ans := turnReq{Otid: "otid-once", Approvals: answers(calls, true, "")}
	tp.mustSend(t, srv, ans)
	if st, _, data := tp.send(t, srv, ans); st != 400 || !strings.Contains(detail(t, data), "No tool call is currently awaiting approval") {
		t.Fatalf("resend: %d %s", st, data)
	}
	if n, sent := srv.CountOtid("otid-once"), srv.SendAttempts("otid-once"); n != 1 || sent != 2 {
		t.Fatalf("CountOtid %d, SendAttempts %d", n, sent)
	}
	// The message must be alone in its request.
	body := turnReq{Text: "hi"}.body()
	body["messages"] = append(body["messages"].([]any), map[string]any{"type": "approval", "approvals": answers(calls, true, "")})
	if st, _, data := call(t, srv, "POST", tp.path, body); st != 422 || !strings.Contains(string(data), "only message") {
		t.Fatalf("mixed: %d %s", st, data)
	}
}

// The deprecated single-call form (approve, approval_request_id: the request's message id or
// its tool call id) answers a one-call request.
func TestApprovalLegacyForm(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	tp := threadPath{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"}
	legacy := func(id string, approve bool) map[string]any {
		return map[string]any{"messages": []any{map[string]any{"type": "approval", "approve": approve,
			"approval_request_id": id, "reason": "legacy"}}}
	}
	for i, approve := range []bool{true, false} {
		evs := tp.mustSend(t, srv, turnReq{Text: "[[sim approval=x]] go"})
		id := requestedCalls(t, evs)[0].ID
		if i == 0 {
			id = evs[1].str("id") // the approval request's message id
		}
		if st, _, data := call(t, srv, "POST", tp.path, legacy("message-unknown", approve)); st != 400 || !strings.Contains(detail(t, data), "Invalid tool call IDs") {
			t.Fatalf("unknown id: %d %s", st, data)
		}
		body := legacy(id, approve)
		conformBody(t, "LettaStreamingRequest", body)
		st, _, data := call(t, srv, "POST", tp.path, body)
		if st != 200 {
			t.Fatalf("%d %s", st, data)
		}
		am := srv.ApprovalMessages(agent)
		if got := am[len(am)-1].Approvals; len(got) != 1 || got[0].Approve != approve || got[0].Reason != "legacy" {
			t.Fatalf("%+v", got)
		}
	}
}

// An approved run can ask again: the second request replaces the first, whose ids are then
// invalid; answering the second ends the turn.
func TestApprovalSecondRequest(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	conv := createConv(t, srv, agent)
	tp := threadPath{name: "conversation", path: convPath(conv), convID: conv}
	first := requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=send_email then_approval=delete_file answer=done]] go"}))
	evs := tp.mustSend(t, srv, turnReq{Approvals: answers(first, true, "")})
	if got := evs[len(evs)-3].str("stop_reason"); got != "requires_approval" {
		t.Fatalf("stop %q: %v", got, types(evs))
	}
	second := requestedCalls(t, evs)
	if len(second) != 1 || second[0].Name != "delete_file" || second[0].ID == first[0].ID {
		t.Fatalf("second %+v", second)
	}
	if p, _ := srv.PendingApproval(agent, conv); p.Calls[0].ID != second[0].ID || p.RunID != evs[0].str("run_id") {
		t.Fatalf("pending %+v", p)
	}
	if st, _, data := tp.send(t, srv, turnReq{Approvals: answers(first, true, "")}); st != 400 || !strings.Contains(detail(t, data), second[0].ID) {
		t.Fatalf("old ids: %d %s", st, data)
	}
	evs = tp.mustSend(t, srv, turnReq{Approvals: answers(second, true, "")})
	if ans := byType(evs, "assistant_message"); len(ans) != 1 || ans[0].str("content") != "done" {
		t.Fatalf("%v", types(evs))
	}
	// then_approval alone is refused.
	if st, _, _ := tp.send(t, srv, turnReq{Text: "[[sim then_approval=x]] go"}); st != 422 {
		t.Fatalf("then_approval alone: %d", st)
	}
}

// A background approval send is deduplicated like a user message: the resend with the same
// otid replays the first one's run (no second run, no second stored message).
func TestApprovalBackgroundDedupe(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	conv := createConv(t, srv, agent)
	calls := requestedCalls(t, convStream(t, srv, conv, turnReq{Text: "[[sim approval=send_email]] go", Background: true}))
	ans := turnReq{Otid: "otid-bg-approve", Background: true, Approvals: answers(calls, true, "")}
	a := withoutPings(convStream(t, srv, conv, ans))
	b := withoutPings(convStream(t, srv, conv, ans))
	if a[0].str("run_id") == "" || a[0].str("run_id") != b[0].str("run_id") || !eqStrings(types(a), types(b)) {
		t.Fatalf("resend did not replay: %v %v", types(a), types(b))
	}
	if srv.SendAttempts("otid-bg-approve") != 2 {
		t.Fatalf("SendAttempts %d", srv.SendAttempts("otid-bg-approve"))
	}
	if n := srv.CountOtid("otid-bg-approve"); n != 1 || len(srv.ApprovalMessages(agent)) != 1 {
		t.Fatalf("CountOtid %d, %d approval messages", n, len(srv.ApprovalMessages(agent)))
	}
	runs := srv.ConversationRuns(conv)
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	// The resume by otid finds it too.
	st, got, data := resumeConv(t, srv, conv, `{"otid": "otid-bg-approve"}`)
	if st != 200 || byType(got, "approval_response_message") == nil {
		t.Fatalf("resume %d %s", st, data)
	}
}

// WaitPendingApproval returns once a thread waits.
func TestWaitPendingApproval(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.001})
	agent := srv.CreateAgent("approval", nil)
	ctx := testCtx(t)
	go func() {
		resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "[[sim think=5s approval=x]] go"}.body(), nil)
		resp.Body.Close()
	}()
	p, err := srv.WaitPendingApproval(ctx, agent, "")
	if err != nil || len(p.Calls) != 1 || p.Calls[0].Name != "x" {
		t.Fatalf("%+v %v", p, err)
	}
	if _, ok := srv.PendingApproval(agent, "conv-00000000-0000-4000-8000-000000000000"); ok {
		t.Fatal("an unknown conversation has no pending approval")
	}
}

func createConv(t *testing.T, srv *lettasim.Server, agent string) string {
	t.Helper()
	return srv.CreateConversation(agent, "")
}

// pendingIn returns the calls of the approval request in evs, or nil when there is none.
func pendingIn(evs []event) []lettasim.ToolCallInfo {
	for _, e := range evs {
		if e.typ() == "approval_request_message" {
			var m struct {
				ToolCalls []struct {
					ToolCallID string `json:"tool_call_id"`
				} `json:"tool_calls"`
			}
			_ = json.Unmarshal([]byte(e.Data), &m)
			var out []lettasim.ToolCallInfo
			for _, c := range m.ToolCalls {
				out = append(out, lettasim.ToolCallInfo{ID: c.ToolCallID})
			}
			return out
		}
	}
	return nil
}

// An approval sent without streaming gets a LettaResponse with the run's messages; an async
// one a Run, whose messages hold the answer.
func TestApprovalSyncAndAsync(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", nil)
	tp := threadPath{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"}
	calls := requestedCalls(t, tp.mustSend(t, srv, turnReq{Text: "[[sim approval=x answer=ok]] go"}))
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages", turnReq{Approvals: answers(calls, true, "")}.body())
	if st != 200 {
		t.Fatalf("sync %d %s", st, data)
	}
	conform(t, "LettaResponse", data)
	var lr struct {
		Messages []struct {
			MessageType string `json:"message_type"`
			Content     any
		}
		StopReason struct {
			StopReason string `json:"stop_reason"`
		} `json:"stop_reason"`
	}
	_ = json.Unmarshal(data, &lr)
	var got []string
	for _, m := range lr.Messages {
		got = append(got, m.MessageType)
	}
	if !eqStrings(got, []string{"tool_return_message", "reasoning_message", "assistant_message"}) || lr.StopReason.StopReason != "end_turn" {
		t.Fatalf("sync answer %v %s", got, lr.StopReason.StopReason)
	}

	ctx := testCtx(t)
	if st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "[[sim approval=y]] go"}.body()); st != 200 {
		t.Fatalf("async %d %s", st, data)
	}
	p, err := srv.WaitPendingApproval(ctx, agent, "")
	if err != nil {
		t.Fatal(err)
	}
	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async",
		turnReq{Approvals: answers([]lettasim.ToolCallInfo{p.Calls[0]}, true, "")}.body())
	if st != 200 {
		t.Fatalf("async approval %d %s", st, data)
	}
	conform(t, "Run", data)
	var run struct{ ID string }
	_ = json.Unmarshal(data, &run)
	if err := srv.WaitRunDone(ctx, run.ID); err != nil {
		t.Fatal(err)
	}
	msgs := conformMessages(t, getJSON(t, srv, "/v1/runs/"+run.ID+"/messages", nil))
	if len(msgs) == 0 || msgs[0]["message_type"] != "approval_response_message" {
		t.Fatalf("run messages %v", msgs)
	}
}

// With approval=, tool_delay is how long the approved call runs: the answer's run is still
// going meanwhile (so a client can lose its stream in the middle of an approval turn).
func TestApprovalToolDelay(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.001})
	agent := srv.CreateAgent("approval", nil)
	conv := createConv(t, srv, agent)
	calls := requestedCalls(t, convStream(t, srv, conv, turnReq{Text: "[[sim approval=x tool_delay=100h]] go"}))
	body := turnReq{Otid: "otid-slow-approve", Background: true, Approvals: answers(calls, true, "")}.body()
	resp := do(t, srv, "POST", convPath(conv), body, nil)
	defer resp.Body.Close()
	sse := newSSE(t, resp.Body)
	var runID string
	for {
		ev, err := sse.next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.typ() == "ping" && runID == "" {
			runID = ev.str("run_id")
		}
		if ev.typ() == "tool_return_message" {
			break
		}
	}
	if info, _ := srv.Run(runID); info.Status != "running" || info.Otid != "otid-slow-approve" {
		t.Fatalf("run %+v", info)
	}
	if !srv.Cancel(testCtx(t), runID) {
		t.Fatal("not in flight")
	}
}

// A Go script's ApprovalRequest with Calls names each call with its arguments; the calls'
// returns come back in the request's order.
func TestApprovalScriptCalls(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("approval", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Two things."},
		{Kind: lettasim.ApprovalRequest, Calls: []lettasim.Call{{Name: "a", Arguments: `{"n": 1}`}, {Name: "b"}}},
		{Kind: lettasim.Assistant, Text: "both done"},
	}})
	tp := threadPath{name: "agent", path: "/v1/agents/" + agent + "/messages/stream"}
	evs := tp.mustSend(t, srv, turnReq{Text: "go"})
	calls := requestedCalls(t, evs)
	p, _ := srv.PendingApproval(agent, "")
	if len(calls) != 2 || calls[0].Arguments != `{"n": 1}` || calls[1].Arguments != `{"query":"go"}` ||
		p.Calls[0] != calls[0] || p.Calls[1] != calls[1] || p.ConversationID != "default" {
		t.Fatalf("calls %+v pending %+v", calls, p)
	}
	if tc := evs[1].field("tool_call").(map[string]any); tc["tool_call_id"] != calls[0].ID || tc["name"] != "a" {
		t.Fatalf("tool_call is not the first call: %v", tc)
	}
	evs = tp.mustSend(t, srv, turnReq{Approvals: []any{answers(calls[1:], true, "")[0], answers(calls[:1], true, "")[0]}})
	rets := byType(evs, "tool_return_message")
	if len(rets) != 2 || rets[0].str("name") != "a" || rets[1].str("name") != "b" || byType(evs, "assistant_message")[0].str("content") != "both done" {
		t.Fatalf("%v", types(evs))
	}
}
