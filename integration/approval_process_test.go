package integration

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A worker killed (SIGKILL) while it streams the run of an approval answer:
// another worker recovers the answer turn, follows the run by its otid and
// delivers once; the approval message reached the simulator once.
func TestProcessKilledMidApprovalTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for Asynq's lease recovery (~1-2 min)")
	}
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	mode := envThreadMode + "=" + string(queue.ThreadConversation)
	b := e.spawnWorker("B", mode)
	b.signal(syscall.SIGSTOP)
	a := e.spawnWorker("A", mode)
	// After the approval, the run thinks for 5s before it answers.
	agent := e.sim.CreateAgent("appr-kill", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.ApprovalRequest, ToolName: "delete_file"},
		{Kind: lettasim.Reasoning, Text: "Deleting.", Delay: simDur(5 * time.Second)},
		{Kind: lettasim.Assistant, Text: "deleted after the crash"},
	}})
	c := e.conv("appr-kill")
	req := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "tidy up"})
	if final, evs := e.waitFinal(c, req.TaskID, 20*time.Second); final.Type != record.EventApprovalRequired {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitAttempt(ans.TaskID, 1, "streaming")
	b.signal(syscall.SIGCONT)
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	time.Sleep(2 * time.Second) // as in TestProcessKilledMidStreamAndMidContinuation: C's recovery check is due ~62s after its start
	e.spawnWorker("C", mode)
	final, evs := e.waitFinal(c, ans.TaskID, 150*time.Second)
	if final.Type != record.EventAnswer || final.Text != "deleted after the crash" {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	e.oneMessagePerOtid(c, req, ans)
	if msgs := e.sim.ApprovalMessages(agent); len(msgs) != 1 || msgs[0].Otid != ans.Otid {
		t.Fatalf("approval messages %+v", msgs)
	}
	rec := e.record(ans.TaskID)
	if len(rec.Attempts) < 2 || rec.Attempts[0].Worker != "A" || strings.Contains(describeAttempts(rec), "resend=\"resent\"") {
		t.Fatalf("journal: %s", describeAttempts(rec))
	}
	t.Logf("journal: %s", describeAttempts(rec))
}
