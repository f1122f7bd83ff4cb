package lettasim_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// The validator is not vacuous: it rejects what the schema forbids.
func TestSchemaHarnessRejects(t *testing.T) {
	bad := map[string]string{
		"Run":                    `{"id":"run-12345678-aaaa","agent_id":"agent-x","surprise":1}`,
		"AssistantMessage":       `{"id":"message-1","date":"2025-01-01T00:00:00+00:00","message_type":"assistant_message"}`,
		"LettaPing":              `{"id":"ping-1","date":"yesterday","message_type":"ping"}`,
		"LettaStreamingResponse": `{"message_type":"stop_reason","stop_reason":"tired"}`,
		"LettaErrorMessage":      `{"message_type":"error_message","run_id":"run-1","error_type":"x","message":"m","seq_id":null}`,
	}
	for name, doc := range bad {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		if schema(t, name).Validate(v) == nil {
			t.Errorf("%s accepted %s", name, doc)
		}
	}
}

// Every JSON object the sim emits validates against its component schema in Letta's OpenAPI
// document: SSE payloads (LettaStreamingResponse, and the schema message_type selects), list
// items (LettaMessageUnion), Run, LettaResponse, AgentState, Health, HTTPValidationError.
func TestConformance(t *testing.T) {
	srv := newServer(t, lettasim.Config{PingInterval: 3 * time.Millisecond})
	agent := srv.CreateAgent("conformance", nil)
	seen := map[string]bool{}

	streams := []struct {
		req   turnReq
		fault *lettasim.Fault
	}{
		{req: turnReq{Text: "plain"}},
		{req: turnReq{Text: "[[sim think=20s tool=web_search,fetch tool_status=error tokens]] tokens", Background: true}},
		{req: turnReq{Text: "[[sim tool=web_search]] steps", Parts: true}},
		{req: turnReq{Text: "[[sim approval=rm_rf answer_delay=10s]] approve"}},
		{req: turnReq{Text: "[[sim end=error end_after=1]] fail fg"}},
		{req: turnReq{Text: "[[sim end=llm_api_error end_after=2 error_type=llm_timeout]] fail bg", Background: true}},
		{req: turnReq{Text: "[[sim end=cancelled end_after=1]] cancel", Background: true}},
		{req: turnReq{Text: "[[sim exception end_after=1]] boom", Background: true}},
		{req: turnReq{Text: "[[sim stop=max_steps]] stop"}},
	}
	var runIDs []string
	for _, s := range streams {
		if s.fault != nil {
			srv.SetFault(agent, *s.fault)
		}
		resp := do(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", s.req.body(), nil)
		evs, err := newSSE(t, resp.Body).all()
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%q: %v", s.req.Text, err)
		}
		for _, e := range evs {
			conformEvent(t, e)
			seen[e.typ()] = true
		}
		runIDs = append(runIDs, evs[0].str("run_id"))
		if calls := pendingIn(evs); calls != nil {
			// The thread waits for the answer: answer it (its stream conforms too).
			_, got, err := streamTurn(t, srv, agent, turnReq{Approvals: answers(calls, true, "")})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range got {
				conformEvent(t, e)
				seen[e.typ()] = true
			}
		}
		if s.req.Background {
			// The resumed stream conforms too.
			st, got, err, _ := resume(t, srv, evs[0].str("run_id"), `{"starting_after": 1}`)
			if st != 200 || err != nil {
				t.Fatalf("resume: %d %v", st, err)
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

	// A system and an assistant-role message in the request are stored (and listed) too.
	st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages", map[string]any{"messages": []any{
		map[string]any{"role": "system", "content": "be brief"},
		map[string]any{"role": "user", "content": []any{map[string]any{"type": "text", "text": "sync"}}, "otid": "otid-sync-c"},
	}})
	if st != 200 {
		t.Fatalf("sync send %d %s", st, data)
	}
	conform(t, "LettaResponse", data)
	var lr struct{ Messages []map[string]any }
	_ = json.Unmarshal(data, &lr)
	for _, m := range lr.Messages {
		if mt := m["message_type"]; mt == "user_message" || mt == "system_message" {
			t.Errorf("LettaResponse repeats the request's %s", mt)
		}
	}

	// Lists.
	listed := map[string]bool{}
	for _, m := range conformMessages(t, getJSON(t, srv, "/v1/agents/"+agent+"/messages?limit=1000", nil)) {
		listed[m["message_type"].(string)] = true
	}
	for _, typ := range []string{"user_message", "system_message", "reasoning_message", "assistant_message",
		"tool_call_message", "tool_return_message", "approval_request_message", "approval_response_message"} {
		if !listed[typ] {
			t.Errorf("no listed %s was checked", typ)
		}
	}
	for _, id := range runIDs {
		conformMessages(t, getJSON(t, srv, "/v1/runs/"+id+"/messages", nil))
		conform(t, "Run", getJSON(t, srv, "/v1/runs/"+id, nil))
	}
	var runs []json.RawMessage
	getJSON(t, srv, "/v1/runs/?agent_id="+agent, &runs)
	for _, r := range runs {
		conform(t, "Run", r)
	}
	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "async"}.body())
	if st != 200 {
		t.Fatal(st)
	}
	conform(t, "Run", data)

	// Agents and health.
	conform(t, "AgentState", getJSON(t, srv, "/v1/agents/"+agent, nil))
	var agents []json.RawMessage
	getJSON(t, srv, "/v1/agents/", &agents)
	for _, a := range agents {
		conform(t, "AgentState", a)
	}
	st, _, data = call(t, srv, "POST", "/v1/agents/", map[string]any{"name": "made over http"})
	if st != 200 {
		t.Fatal(st)
	}
	conform(t, "AgentState", data)
	var created struct{ ID, Name string }
	_ = json.Unmarshal(data, &created)
	if created.Name != "made over http" || !strings.HasPrefix(created.ID, "agent-") {
		t.Fatalf("created %s", data)
	}
	// The new agent works.
	if _, _, err := streamTurn(t, srv, created.ID, turnReq{Text: "hi"}); err != nil {
		t.Fatal(err)
	}
	conform(t, "Health", getJSON(t, srv, "/v1/health/", nil))
	conform(t, "Health", getJSON(t, srv, "/v1/health", nil))

	// Errors: validation errors are HTTPValidationError; the others {"detail": "..."}.
	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/stream", map[string]any{})
	if st != 422 {
		t.Fatal(st)
	}
	conform(t, "HTTPValidationError", data)
	st, _, data = call(t, srv, "GET", "/v1/agents/"+agent+"/messages?limit=-1", nil)
	if st != 422 {
		t.Fatal(st)
	}
	conform(t, "HTTPValidationError", data)
	if err := srv.WaitIdle(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// Cancel's answer is an object of run id -> status.
	srv.SetScript(agent, slowAnswer(time.Hour))
	call(t, srv, "POST", "/v1/agents/"+agent+"/messages/async", turnReq{Text: "long"}.body())
	st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", nil)
	var res map[string]string
	if st != 200 || json.Unmarshal(data, &res) != nil || len(res) != 1 {
		t.Fatalf("cancel %d %s", st, data)
	}
	if !bytes.HasPrefix(data, []byte(`{"run-`)) {
		t.Fatalf("cancel body %s", data)
	}
}
