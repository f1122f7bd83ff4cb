package app

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
)

// POST /enqueue with an agent name in agent_id is refused with a 400 naming the field (it used
// to be taken, 202, and the turn archived later with Letta's 422); an id is taken.
func TestHTTPEnqueueRefusesAgentName(t *testing.T) {
	r := startDevWorker(t)
	post := func(body string) (int, map[string]string) {
		t.Helper()
		resp, err := http.Post("http://"+r.HTTPAddr+"/enqueue", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m
	}
	for _, name := range []string{DemoAgent, "agent-demo", "Agent-" + uuid.NewString()[:8]} {
		code, m := post(`{"agent_id": "` + name + `", "text": "hi", "conversation": {"integration": "t", "chat_id": "name-` + name + `"}}`)
		if code != http.StatusBadRequest || m["field"] != "agent_id" || !strings.Contains(m["error"], "/v1/agents/?name=") {
			t.Errorf("agent_id %q: %d %v; want 400 naming agent_id and how to find the id", name, code, m)
		}
	}
	code, m := post(`{"agent_id": "` + r.Dev.Agents[DemoAgent] + `", "text": "hi", "conversation": {"integration": "t", "chat_id": "by-id"}}`)
	if code != http.StatusAccepted {
		t.Errorf("agent_id <id>: %d %v", code, m)
	}
	// What the queue refuses it still refuses in its own words (here: a missing agent_id).
	code, m = post(`{"text": "hi", "conversation": {"integration": "t", "chat_id": "none"}}`)
	if code != http.StatusBadRequest || m["field"] != "agent_id" {
		t.Errorf("no agent_id: %d %v", code, m)
	}
	// An approval answer (no agent_id) still reaches the queue's handler.
	code, m = post(`{"answer": {"request": "` + uuid.NewString() + `", "approve": true}}`)
	if code != http.StatusNotFound || m["field"] != "answer.request" {
		t.Errorf("answer to no request: %d %v", code, m)
	}
}

// The worker's /enqueue reads as much as the queue's handler does, no less (a body it could not
// look into would reach the queue unchecked) and no more: a body one byte past its bound gets
// the queue's 413, which names the queue's bound.
func TestEnqueueBodyBoundMatchesQueue(t *testing.T) {
	r := startDevWorker(t)
	body := `{"agent_id": "demo", "text": "` + strings.Repeat("a", maxEnqueueBodyBytes) + `"}`
	resp, err := http.Post("http://"+r.HTTPAddr+"/enqueue", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]string
	_ = json.NewDecoder(resp.Body).Decode(&m)
	got := regexp.MustCompile(`larger than (\d+) bytes`).FindStringSubmatch(m["error"])
	if resp.StatusCode != http.StatusRequestEntityTooLarge || got == nil || got[1] != strconv.Itoa(maxEnqueueBodyBytes) {
		t.Errorf("%d %v; want 413 from the queue naming its bound, %d bytes", resp.StatusCode, m, maxEnqueueBodyBytes)
	}
}
