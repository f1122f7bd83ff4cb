package app

import (
	"encoding/base64"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/queue"
)

// enqueue --wait on demo-approval exits 4 naming the task to answer;
// enqueue approve --wait <task-id> then prints the answer and exits 0; a
// second approve is no second answer; deny of an unknown task is bad input.
func TestEnqueueApproveDev(t *testing.T) {
	r := startDevWorker(t)
	code, _, errOut := enqueue(t, r, "--wait", "--timeout=30s", "--agent="+DemoAgentApproval, "--message-id=m1", "email the team")
	if code != ExitApproval || !strings.Contains(errOut, "send_email") {
		t.Fatalf("enqueue: exit %d, stderr %q", code, errOut)
	}
	approveCmd := lineAfter(t, errOut, "answer with:")
	if !strings.Contains(approveCmd, " approve --wait turn:") {
		t.Fatalf("no answer command in %q", errOut)
	}
	taskID := strings.Fields(approveCmd)[len(strings.Fields(approveCmd))-1]
	// The pending request's scheduled expiry is a pending approval, not a turn waiting in line.
	if w, p := scrapeWaiting(t, r), scrapeQueueGauge(t, r, "lettaq_approvals_pending"); w != 0 || p != 1 {
		t.Errorf("while the approval is pending: lettaq_turns_waiting %d, lettaq_approvals_pending %d; want 0 and 1", w, p)
	}
	// The printed command runs as printed (the dev worker's Redis address included).
	code, out, errOut := runHint(t, approveCmd)
	if code != ExitOK || !strings.Contains(out, "Done: I emailed the team") {
		t.Fatalf("approve as printed (%s): exit %d\nstdout %q\nstderr %q", approveCmd, code, out, errOut)
	}
	if p := scrapeQueueGauge(t, r, "lettaq_approvals_pending"); p != 0 {
		t.Errorf("once answered: lettaq_approvals_pending %d, want 0", p)
	}
	code, out, errOut = enqueue(t, r, "deny", "--reason", "too late", taskID)
	if code != ExitOK || !strings.Contains(out, "answered before") {
		t.Errorf("second answer: exit %d %q %q", code, out, errOut)
	}
	if n := len(r.Dev.Sim.ApprovalMessages(r.Dev.Agents[DemoAgentApproval])); n != 1 {
		t.Errorf("%d approval messages at the simulator, want 1", n)
	}
	resp, err := http.Get("http://" + r.HTTPAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{`lettaq_approvals_total{event="requested"} 1`, `lettaq_approvals_total{event="answered"} 1`, "lettaq_approval_wait_seconds_count 1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if code, _, errOut := enqueue(t, r, "deny", "turn:no-such-task"); code != ExitUsage || !strings.Contains(errOut, "no approval request") {
		t.Errorf("unknown request: exit %d %q", code, errOut)
	}
	if code, _, _ := enqueue(t, r, "approve"); code != ExitUsage {
		t.Errorf("no task id: exit %d", code)
	}
}

// --image takes a URL or @file (base64 with the media type of its
// extension); a file that is not an image is refused naming it.
func TestImageFlag(t *testing.T) {
	dir := t.TempDir()
	png := dir + "/a.png"
	if err := os.WriteFile(png, []byte("\x89PNG\r\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	txt := dir + "/a.txt"
	_ = os.WriteFile(txt, []byte("x"), 0o600)
	var got []queue.Image
	v := imagesValue{&got}
	if err := v.Set("https://example.test/a.jpg"); err != nil {
		t.Fatal(err)
	}
	if err := v.Set("@" + png); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].URL != "https://example.test/a.jpg" || got[1].MediaType != "image/png" ||
		got[1].Data != base64.StdEncoding.EncodeToString([]byte("\x89PNG\r\n")) {
		t.Fatalf("images %+v", got)
	}
	if err := v.Set("@" + txt); err == nil || !strings.Contains(err.Error(), "a.txt") {
		t.Errorf("a text file: %v", err)
	}
	if err := v.Set("@" + dir + "/missing.png"); err == nil {
		t.Error("a missing file was taken")
	}
}
