package app

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/agentclient"
)

// syncBuf is a goroutine-safe writer for the commands' output.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// startDevWorker starts a dev-mode worker in-process on free ports.
func startDevWorker(t *testing.T) *Running {
	t.Helper()
	r, _ := startDevWorkerWith(t)
	return r
}

// startDevWorkerWith starts a dev-mode worker with extra flags and returns its greeting.
func startDevWorkerWith(t *testing.T, extra ...string) (*Running, string) {
	t.Helper()
	cfg, err := ParseWorkerSettings(append([]string{"--dev", "--dev-redis-addr=127.0.0.1:0", "--dev-letta-addr=127.0.0.1:0",
		"--http-addr=127.0.0.1:0", "--shutdown-timeout=5s", "--task-check-interval=20ms"}, extra...), env(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var greeting syncBuf
	r, err := StartWorker(ctx, cfg, slog.New(slog.NewTextHandler(io.Discard, nil)), &greeting)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.Done():
		case <-time.After(15 * time.Second):
			t.Error("dev worker did not stop")
		}
	})
	if !strings.Contains(greeting.String(), "go run ./cmd/enqueue --dev") || !strings.Contains(greeting.String(), " --wait ") {
		t.Errorf("greeting lacks the next command:\n%s", greeting.String())
	}
	return r, greeting.String()
}

func enqueue(t *testing.T, r *Running, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut syncBuf
	args = append([]string{"--dev", "--dev-redis-addr=" + r.RedisAddr}, args...)
	code = RunEnqueue(context.Background(), args, env(nil), strings.NewReader(""), &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestDevModeSmoke(t *testing.T) {
	r := startDevWorker(t)

	// Ready, and the monitor answers (no token needed on loopback).
	for _, p := range []string{"/readyz", "/monitor/", "/metrics"} {
		resp, err := http.Get("http://" + r.HTTPAddr + p)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			t.Errorf("%s = %d", p, resp.StatusCode)
		}
	}

	code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "hello dev")
	if code != ExitOK || !strings.Contains(out, "you said: hello dev") {
		t.Fatalf("enqueue --wait: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if n := len(r.Dev.Sim.UserMessages(r.Dev.Agents[DemoAgent])); n != 1 {
		t.Errorf("agent received %d user messages, want 1", n)
	}

	// The same message id again: one turn only; --json gives the result.
	code, out, _ = enqueue(t, r, "--message-id=m1", "--json", "once")
	if code != ExitOK || !strings.Contains(out, `"duplicate":false`) {
		t.Errorf("first m1: %d %q", code, out)
	}
	code, out, _ = enqueue(t, r, "--message-id=m1", "--json", "--wait", "--timeout=30s", "once")
	if code != ExitOK || !strings.Contains(out, `"duplicate":true`) || !strings.Contains(out, `"type":"answer"`) {
		t.Errorf("duplicate m1: %d %q", code, out)
	}

	// Exit codes.
	r.Dev.Sim.CreateAgent("approver", nil)
	broken := r.Dev.Sim.CreateAgent("broken", nil)
	if code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent=approver", "[[sim approval=send_email]] mail it"); code != ExitApproval {
		t.Errorf("approval: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := enqueue(t, r, "--wait", "--timeout=500ms", "[[sim think=30s]] slow"); code != ExitTimedOut || !strings.Contains(errOut, "no answer within") {
		t.Errorf("timeout: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--max-retry=0", "--agent="+broken, "[[sim status=500 times=always]] fail"); code != ExitFailed {
		t.Errorf("failure: exit %d, stderr %q", code, errOut)
	}
	if code, _, _ := enqueue(t, r); code != ExitUsage {
		t.Errorf("no text: exit %d", code)
	}
	if code, _, _ := enqueue(t, r, "--timeout=soon", "x"); code != ExitUsage {
		t.Errorf("bad flag: exit %d", code)
	}
	if code, _, _ := enqueue(t, r, "--otid=not-a-uuid", "x"); code != ExitUsage {
		t.Errorf("bad otid: exit %d", code)
	}

	// The journal knows the turns.
	code, out, errOut = enqueue(t, r, "journal", "recent", "--limit", "3")
	if code != ExitOK || !strings.Contains(out, `"outcome"`) {
		t.Errorf("journal recent: %d %q %q", code, out, errOut)
	}
	code, _, _ = enqueue(t, r, "journal", "nonsense")
	if code != ExitUsage {
		t.Errorf("journal nonsense: exit %d", code)
	}
	code, _, _ = enqueue(t, r, "journal", "show", "no-such-task")
	if code != ExitFailed {
		t.Errorf("journal show missing: exit %d", code)
	}
}

// Dev mode's demo agents have Letta-shaped ids and names; enqueue --agent takes a name (looked
// up through GET /v1/agents/?name=) or an id, and refuses a name that is not exactly one agent.
func TestDevAgentsByName(t *testing.T) {
	r := startDevWorker(t)
	resp, err := http.Get(r.LettaURL + "/v1/agents/")
	if err != nil {
		t.Fatal(err)
	}
	var agents []struct{ ID, Name string }
	err = json.NewDecoder(resp.Body).Decode(&agents)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]string{}
	for _, a := range agents {
		if !agentclient.IsAgentID(a.ID) {
			t.Errorf("agent %q has id %q", a.Name, a.ID)
		}
		names[a.Name] = a.ID
	}
	for _, n := range DemoAgentNames {
		if names[n] == "" || names[n] != r.Dev.Agents[n] {
			t.Errorf("no demo agent %q listed: %v", n, names)
		}
	}

	code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent", DemoAgentTools, "look it up")
	if code != ExitOK || !strings.Contains(out, "I looked it up") {
		t.Fatalf("--agent %s: exit %d %q %q", DemoAgentTools, code, out, errOut)
	}
	if n := len(r.Dev.Sim.UserMessages(names[DemoAgentTools])); n != 1 {
		t.Errorf("%s received %d messages", DemoAgentTools, n)
	}
	// demo-approval asks approval for a tool call: exit 4, and its thread waits at the simulator.
	if code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent", DemoAgentApproval, "email the team"); code != ExitApproval {
		t.Fatalf("--agent %s: exit %d %q %q", DemoAgentApproval, code, out, errOut)
	}
	if p := r.Dev.Sim.PendingApprovals(names[DemoAgentApproval]); len(p) != 1 || p[0].Calls[0].Name != "send_email" {
		t.Errorf("%s: pending %+v", DemoAgentApproval, p)
	}
	// An id works as it is.
	if code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent", names[DemoAgent], "by id"); code != ExitOK || !strings.Contains(out, "you said: by id") {
		t.Fatalf("--agent <id>: exit %d %q %q", code, out, errOut)
	}
	// A name of no agent, or of two, is bad input that says what is wrong.
	r.Dev.Sim.CreateAgent("twin", nil)
	r.Dev.Sim.CreateAgent("twin", nil)
	for name, want := range map[string]string{"nobody": `no agent is named "nobody"`, "twin": `2 agents are named "twin"`} {
		code, _, errOut := enqueue(t, r, "--agent", name, "hi")
		if code != ExitUsage || !strings.Contains(errOut, want) {
			t.Errorf("--agent %s: exit %d, stderr %q", name, code, errOut)
		}
	}
}

// Dev mode's simulator answers an agent id it does not know with 404, as Letta does: it used to
// create the agent on first use, so a mistyped id got an answer in dev and an error in
// production. The demo agents are still there.
func TestDevUnknownAgentIDIsNotFound(t *testing.T) {
	r := startDevWorker(t)
	unknown := "agent-" + uuid.NewString()
	resp, err := http.Get(r.LettaURL + "/v1/agents/" + unknown)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET /v1/agents/<unknown id> = %d, want 404", resp.StatusCode)
	}
	code, out, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent", unknown, "anyone there?")
	if code != ExitFailed || !strings.Contains(errOut, "not found") {
		t.Errorf("enqueue --wait --agent <unknown id>: exit %d, stdout %q, stderr %q; want exit %d and Letta's not found", code, out, errOut, ExitFailed)
	}
	if n := len(r.Dev.Sim.UserMessages(unknown)); n != 0 {
		t.Errorf("the unknown agent received %d messages", n)
	}
	for _, name := range DemoAgentNames {
		resp, err := http.Get(r.LettaURL + "/v1/agents/" + r.Dev.Agents[name])
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("demo agent %s: GET = %d", name, resp.StatusCode)
		}
	}
}
