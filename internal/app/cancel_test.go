package app

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// enqueue cancel --chat cli:C --agent demo-slow --all stops the chat's running turn (its
// worker asks Letta; the worker counts it in lettaq_turns_cancelled_total) and its waiting one
// (removed at once); a second cancel of the running turn says it was already answered (exit
// 1); an unknown id is bad input naming it (exit 2); POST /cancel answers 404 for it.
func TestEnqueueCancelDev(t *testing.T) {
	r := startDevWorker(t)
	// The first message runs (demo-slow thinks 20s): --wait gives up after 1s, the turn goes on.
	code, out, errOut := enqueue(t, r, "--json", "--wait", "--timeout=1s", "--agent="+DemoAgentSlow, "--chat=c1", "--message-id=m1", "think")
	if code != ExitTimedOut {
		t.Fatalf("enqueue --wait: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	var first struct {
		TaskID string `json:"task_id"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &first); err != nil || first.TaskID == "" {
		t.Fatalf("no enqueue result in %q: %v", out, err)
	}
	if code, _, errOut := enqueue(t, r, "--agent="+DemoAgentSlow, "--chat=c1", "--message-id=m2", "and then"); code != ExitOK {
		t.Fatalf("second message: exit %d %q", code, errOut)
	}
	code, out, errOut = enqueue(t, r, "cancel", "--chat=cli:c1", "--agent="+DemoAgentSlow, "--all", "--reason", "wrong chat")
	if code != ExitOK || !strings.Contains(out, "cancelling "+first.TaskID) || !strings.Contains(out, "cancelled turn:cli:c1:m2") {
		t.Fatalf("cancel --chat --all: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	// A --wait on the cancelled turn's chat says it was cancelled (exit 1).
	code, _, errOut = enqueue(t, r, "--wait", "--timeout=20s", "--agent="+DemoAgentSlow, "--chat=c1", "--message-id=m1", "think")
	if code != ExitFailed || !strings.Contains(errOut, "cancelled: the turn was stopped") {
		t.Errorf("--wait on the cancelled message: exit %d, stderr %q", code, errOut)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(metricsText(t, r), `lettaq_turns_cancelled_total{phase="streaming",queue="lettaq"} 1`) {
		if time.Now().After(deadline) {
			t.Fatalf("no cancelled turn counted:\n%s", grepLines(metricsText(t, r), "cancelled"))
		}
		time.Sleep(50 * time.Millisecond)
	}
	code, out, errOut = enqueue(t, r, "cancel", first.TaskID)
	if code != ExitFailed || !strings.Contains(out, "already answered (outcome cancelled)") {
		t.Errorf("second cancel: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	if code, _, errOut := enqueue(t, r, "cancel", "turn:cli:nobody:none"); code != ExitUsage || !strings.Contains(errOut, `no turn has the task id or otid "turn:cli:nobody:none"`) {
		t.Errorf("unknown id: exit %d %q", code, errOut)
	}
	if code, _, errOut := enqueue(t, r, "cancel"); code != ExitUsage || !strings.Contains(errOut, "cancel takes one turn") {
		t.Errorf("no id: exit %d %q", code, errOut)
	}
	resp, err := http.Post("http://"+r.HTTPAddr+"/cancel", "application/json", bytes.NewReader([]byte(`{"task_id": "turn:cli:nobody:none"}`)))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound || !strings.Contains(string(body), "no turn has the task id") {
		t.Errorf("POST /cancel of an unknown id: %d %s", resp.StatusCode, body)
	}
}

func metricsText(t *testing.T, r *Running) string {
	t.Helper()
	resp, err := http.Get("http://" + r.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func grepLines(text, word string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, word) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
