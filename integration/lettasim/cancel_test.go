package lettasim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// The cancel endpoints behave as WIRE.md says Letta's do, and what they answer validates
// against Letta's schema, point by point.
func TestCancelMatchesLetta(t *testing.T) {
	srv := newServer(t, lettasim.Config{TimeScale: 0.01})
	agent := srv.CreateAgent("cancel-wire", &lettasim.Script{Tokens: true, TokenDelay: time.Hour, Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "one two three"},
	}})
	runIDPattern := regexp.MustCompile(`^run-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

	// cancelAnswer checks a 200 answer: an object (the schema's "additionalProperties: true")
	// of run id -> "cancelled", naming run.
	cancelAnswer := func(t *testing.T, st int, data []byte, run string) {
		t.Helper()
		var m map[string]string
		if st != http.StatusOK || json.Unmarshal(data, &m) != nil || m[run] != "cancelled" {
			t.Fatalf("cancel: %d %s, want 200 {%q: \"cancelled\"}", st, data, run)
		}
		for id := range m {
			if !runIDPattern.MatchString(id) {
				t.Errorf("cancel answer key %q is not a run id", id)
			}
		}
	}
	// endsCancelled reads the rest of a cancelled run's stream: each chunk conforms, the last
	// message is the stop reason "cancelled", then [DONE].
	endsCancelled := func(t *testing.T, sse *sseReader) {
		t.Helper()
		evs, err := sse.all()
		if err != nil {
			t.Fatal(err)
		}
		var last event
		for _, ev := range evs {
			conformEvent(t, ev)
			if ev.Data != "[DONE]" && ev.typ() != "ping" {
				last = ev
			}
		}
		if len(evs) == 0 || evs[len(evs)-1].Data != "[DONE]" {
			t.Errorf("the stream does not end with [DONE]: %v", types(evs))
		}
		if last.typ() != "stop_reason" || last.str("stop_reason") != "cancelled" {
			t.Errorf("the stream's last message %q %v, want stop_reason cancelled", last.typ(), last.Data)
		}
	}
	// runCancelled: GET /v1/runs/{id} conforms to Run, with status and stop_reason cancelled.
	runCancelled := func(t *testing.T, run string) {
		t.Helper()
		data := getJSON(t, srv, "/v1/runs/"+run, nil)
		conform(t, "Run", data)
		var r struct {
			Status     string `json:"status"`
			StopReason string `json:"stop_reason"`
		}
		if json.Unmarshal(data, &r) != nil || r.Status != "cancelled" || r.StopReason != "cancelled" {
			t.Errorf("run %s: %s, want status and stop_reason cancelled", run, data)
		}
	}
	// open starts a streaming send and returns its stream after the first ping (its run id).
	open := func(t *testing.T, path string, extra map[string]any) (*sseReader, string) {
		t.Helper()
		resp := do(t, srv, "POST", path, turnReq{Text: "slow", Background: true, Extra: extra}.body(), nil)
		t.Cleanup(func() { resp.Body.Close() })
		if resp.StatusCode != 200 {
			data, _ := io.ReadAll(resp.Body)
			t.Fatalf("send: %d %s", resp.StatusCode, data)
		}
		sse := newSSE(t, resp.Body)
		ev, err := sse.next()
		if err != nil || ev.typ() != "ping" || ev.str("run_id") == "" {
			t.Fatalf("first event %v %v", ev, err)
		}
		conformEvent(t, ev)
		return sse, ev.str("run_id")
	}

	t.Run("conversation", func(t *testing.T) {
		conv := srv.CreateConversation(agent, "")
		st, _, data := call(t, srv, "POST", "/v1/conversations/"+conv+"/cancel", nil)
		if st != http.StatusConflict || !strings.HasPrefix(detail(t, data), "NO_ACTIVE_RUNS_TO_CANCEL: ") {
			t.Fatalf("nothing runs: %d %s, want 409 {\"detail\": \"NO_ACTIVE_RUNS_TO_CANCEL: …\"}", st, data)
		}
		sse, run := open(t, convPath(conv), nil)
		st, _, data = call(t, srv, "POST", "/v1/conversations/"+conv+"/cancel", nil)
		cancelAnswer(t, st, data, run)
		endsCancelled(t, sse)
		runCancelled(t, run)
		// A resume of the cancelled run replays its end too.
		resp := do(t, srv, "POST", "/v1/runs/"+run+"/stream", map[string]any{"starting_after": 0}, nil)
		defer resp.Body.Close()
		endsCancelled(t, newSSE(t, resp.Body))
		if st, _, data := call(t, srv, "POST", "/v1/conversations/"+conv+"/cancel", nil); st != http.StatusConflict {
			t.Errorf("after the cancel: %d %s, want 409", st, data)
		}
	})

	t.Run("default conversation", func(t *testing.T) {
		st, _, data := call(t, srv, "POST", "/v1/conversations/default/cancel", nil)
		if st != http.StatusUnprocessableEntity {
			t.Fatalf("default without agent_id: %d %s, want 422", st, data)
		}
		conform(t, "HTTPValidationError", data)
		if !strings.Contains(string(data), "agent_id") {
			t.Errorf("the 422 does not name agent_id: %s", data)
		}
		path := "/v1/conversations/default/cancel?agent_id=" + agent
		if st, _, data := call(t, srv, "POST", path, nil); st != http.StatusConflict || !strings.HasPrefix(detail(t, data), "NO_ACTIVE_RUNS_TO_CANCEL: ") {
			t.Fatalf("default, nothing runs: %d %s", st, data)
		}
		sse, run := open(t, convPath("default"), map[string]any{"agent_id": agent})
		st, _, data = call(t, srv, "POST", path, nil)
		cancelAnswer(t, st, data, run)
		endsCancelled(t, sse)
		runCancelled(t, run)
	})

	t.Run("agent endpoint", func(t *testing.T) {
		sse, run := open(t, "/v1/agents/"+agent+"/messages/stream", nil)
		other, otherRun := open(t, "/v1/agents/"+agent+"/messages/stream", nil)
		// By run id: only that run is cancelled.
		st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", map[string]any{"run_ids": []string{run}})
		cancelAnswer(t, st, data, run)
		if strings.Contains(string(data), otherRun) {
			t.Errorf("the cancel of %s named %s too: %s", run, otherRun, data)
		}
		endsCancelled(t, sse)
		runCancelled(t, run)
		// Still active: "created" until its steps start (its first ping may
		// come before), then "running".
		if r, _ := srv.Run(otherRun); r.Status != "running" && r.Status != "created" {
			t.Errorf("the other run is %q, want it still active (created or running)", r.Status)
		}
		st, _, data = call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", nil)
		cancelAnswer(t, st, data, otherRun)
		endsCancelled(t, other)
		if st, _, data := call(t, srv, "POST", "/v1/agents/"+agent+"/messages/cancel", nil); st != http.StatusConflict {
			t.Errorf("nothing runs: %d %s, want 409", st, data)
		}
	})
}
