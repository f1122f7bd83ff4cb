package lettasim_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// conformBody checks a request body the tests send against its schema, so the conversation
// tests speak the API as a real client must.
func conformBody(t *testing.T, name string, body any) {
	t.Helper()
	var data []byte
	switch b := body.(type) {
	case string:
		data = []byte(b)
	default:
		var err error
		if data, err = json.Marshal(b); err != nil {
			t.Fatal(err)
		}
	}
	conform(t, name, data)
}

// Every object the conversation endpoints emit validates against Letta's schema: Conversation
// (create, get, list), the SSE events of sends, replays and resumes, LettaResponse, the
// conversation's message list, Run (with its conversation_id), the cancel answer and the 422s.
func TestConversationConformance(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 3 * time.Millisecond})
	agent := srv.CreateAgent("conformance", nil)

	create := `{"summary": "lettaq:telegram:42"}`
	conformBody(t, "CreateConversation", create)
	conformBody(t, "CreateConversation", `{}`)
	st, _, data := call(t, srv, "POST", "/v1/conversations/?agent_id="+agent, create)
	if st != 200 {
		t.Fatalf("create %d %s", st, data)
	}
	conform(t, "Conversation", data)
	var c struct{ ID string }
	_ = json.Unmarshal(data, &c)
	st, _, data = call(t, srv, "POST", "/v1/conversations/?agent_id="+agent, nil) // no body at all
	if st != 200 {
		t.Fatalf("create without a body %d %s", st, data)
	}
	conform(t, "Conversation", data)

	seen := map[string]bool{}
	var runIDs []string
	for _, tr := range []turnReq{
		{Text: "plain", Otid: "otid-c1"},
		{Text: "[[sim think=20s tool=web_search,fetch tool_status=error tokens]] tokens", Otid: "otid-c2", Background: true},
		{Text: "[[sim approval=rm_rf]] approve", Parts: true},
		{Text: "[[sim end=error end_after=1]] fail fg"},
		{Text: "[[sim end=llm_api_error end_after=2 error_type=llm_timeout]] fail bg", Background: true},
		{Text: "[[sim end=cancelled end_after=1]] cancel", Background: true},
		{Text: "[[sim exception end_after=1]] boom", Background: true},
		{Text: "default thread", Extra: map[string]any{"agent_id": agent, "stream_tokens": true, "max_steps": 5}},
	} {
		id := c.ID
		if tr.Extra["agent_id"] != nil {
			id = "default"
		}
		conformBody(t, "ConversationMessageRequest", tr.body())
		evs := convStream(t, srv, id, tr)
		for _, e := range evs {
			conformEvent(t, e)
			seen[e.typ()] = true
		}
		runIDs = append(runIDs, evs[0].str("run_id"))
		if calls := pendingIn(evs); calls != nil {
			ans := turnReq{Approvals: answers(calls, false, "no"), Extra: tr.Extra}
			conformBody(t, "ConversationMessageRequest", ans.body())
			for _, e := range convStream(t, srv, id, ans) {
				conformEvent(t, e)
				seen[e.typ()] = true
			}
		}
		if tr.Background {
			// The replay of a same-otid resend and a resume conform too.
			if tr.Otid != "" {
				for _, e := range convStream(t, srv, id, tr) {
					conformEvent(t, e)
				}
			}
			body := `{"run_id": "` + evs[0].str("run_id") + `", "starting_after": 1, "include_pings": true, "poll_interval": 0.1, "batch_size": 100}`
			conformBody(t, "RetrieveStreamRequest", body)
			st, got, data := resumeConv(t, srv, id, body)
			if st != 200 {
				t.Fatalf("resume %d %s", st, data)
			}
			for _, e := range got {
				conformEvent(t, e)
			}
		}
	}
	for _, typ := range []string{"ping", "reasoning_message", "assistant_message", "tool_call_message",
		"tool_return_message", "approval_request_message", "approval_response_message", "stop_reason", "usage_statistics", "[DONE]",
		"error:error_message", "error:INTERNAL_SERVER_ERROR"} {
		if !seen[typ] {
			t.Errorf("no %s event was checked", typ)
		}
	}

	// streaming=false.
	body := turnReq{Text: "sync"}.body()
	body["streaming"] = false
	conformBody(t, "ConversationMessageRequest", body)
	st, _, data = call(t, srv, "POST", convPath(c.ID), body)
	if st != 200 {
		t.Fatalf("sync %d %s", st, data)
	}
	conform(t, "LettaResponse", data)

	// Reads.
	conform(t, "Conversation", getJSON(t, srv, "/v1/conversations/"+c.ID, nil))
	var list []json.RawMessage
	getJSON(t, srv, "/v1/conversations/?agent_id="+agent+"&summary_search=lettaq&order=asc&order_by=created_at&limit=10", &list)
	if len(list) != 1 {
		t.Fatalf("list %d", len(list))
	}
	for _, it := range list {
		conform(t, "Conversation", it)
	}
	conformMessages(t, getJSON(t, srv, "/v1/conversations/"+c.ID+"/messages?limit=1000", nil))
	conformMessages(t, getJSON(t, srv, "/v1/conversations/default/messages?agent_id="+agent, nil))
	for _, id := range runIDs {
		conform(t, "Run", getJSON(t, srv, "/v1/runs/"+id, nil))
	}
	var runs []map[string]any
	data = getJSON(t, srv, "/v1/runs/?conversation_id="+c.ID, &runs)
	var raws []json.RawMessage
	_ = json.Unmarshal(data, &raws)
	for i, r := range raws {
		conform(t, "Run", r)
		if runs[i]["conversation_id"] != c.ID {
			t.Fatalf("run of the conversation says conversation_id %v", runs[i]["conversation_id"])
		}
	}
	if len(runs) != len(runIDs)+1 { // the default thread's run is not the conversation's; sync and the approval add one each
		t.Fatalf("runs of the conversation: %d, want %d", len(runs), len(runIDs))
	}

	// Cancel's answer is an object of run id -> status.
	holdLock(t, srv, c.ID, turnReq{Text: "long"})
	st, _, data = call(t, srv, "POST", "/v1/conversations/"+c.ID+"/cancel", nil)
	var res map[string]string
	if st != 200 || json.Unmarshal(data, &res) != nil || len(res) != 1 {
		t.Fatalf("cancel %d %s", st, data)
	}

	// Validation errors are HTTPValidationError.
	for _, p := range []string{"/v1/conversations/conv-x", "/v1/conversations/conv-x/messages"} {
		st, _, data := call(t, srv, "GET", p, nil)
		if st != 422 {
			t.Fatalf("%s: %d", p, st)
		}
		conform(t, "HTTPValidationError", data)
		if !strings.Contains(string(data), "string_pattern_mismatch") {
			t.Fatalf("%s", data)
		}
	}
	st, _, data = call(t, srv, "POST", convPath(c.ID), map[string]any{})
	if st != 422 {
		t.Fatalf("empty send %d", st)
	}
	conform(t, "HTTPValidationError", data)
}
