package app

import (
	"strings"
	"testing"
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
	i := strings.Index(errOut, "enqueue approve ")
	if i < 0 {
		t.Fatalf("no answer command in %q", errOut)
	}
	taskID := strings.Fields(errOut[i+len("enqueue approve "):])[0]
	code, out, errOut := enqueue(t, r, "approve", "--wait", "--timeout=30s", taskID)
	if code != ExitOK || !strings.Contains(out, "Done: I emailed the team") {
		t.Fatalf("approve: exit %d\nstdout %q\nstderr %q", code, out, errOut)
	}
	code, out, errOut = enqueue(t, r, "deny", "--reason", "too late", taskID)
	if code != ExitOK || !strings.Contains(out, "answered before") {
		t.Errorf("second answer: exit %d %q %q", code, out, errOut)
	}
	if n := len(r.Dev.Sim.ApprovalMessages(r.Dev.Agents[DemoAgentApproval])); n != 1 {
		t.Errorf("%d approval messages at the simulator, want 1", n)
	}
	if code, _, errOut := enqueue(t, r, "deny", "turn:no-such-task"); code != ExitUsage || !strings.Contains(errOut, "no approval request") {
		t.Errorf("unknown request: exit %d %q", code, errOut)
	}
	if code, _, _ := enqueue(t, r, "approve"); code != ExitUsage {
		t.Errorf("no task id: exit %d", code)
	}
}
