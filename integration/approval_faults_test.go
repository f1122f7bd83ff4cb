package integration

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
)

// TestApprovalAnswerThatGivesUpStaysAnswerable (issue 24, defect 7): Letta
// answers 503 to an approval answer until its turn gives up. The answer
// never reached Letta, so the request stays pending: the user answers again
// (a new answer turn, not a duplicate), the tool runs, and a later message
// of the chat is answered.
func TestApprovalAnswerThatGivesUpStaysAnswerable(t *testing.T) {
	t.Parallel()
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr-giveup", nil)
	c := e.conv("giveup")
	req, _ := e.requestApproval(agent, c, "m1", "delete_file")

	// A client whose turns are retried once.
	short, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: time.Hour, Replies: e.replies, Ordering: e.ordering(), MaxRetry: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = short.Close() })
	e.sim.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503, Persistent: true})
	first, err := short.Approve(context.Background(), req.TaskID, "")
	if err != nil || first.Duplicate {
		t.Fatalf("first answer: %+v, %v", first, err)
	}
	if f, evs := e.waitFinal(c, first.TaskID, 60*time.Second); f.Type != queue.EventError || !f.Permanent {
		t.Fatalf("first answer's final %+v; %s", f, summarize(evs))
	}
	e.sim.ClearFault(agent)
	if n := len(e.sim.ApprovalMessages(agent)); n != 0 {
		t.Fatalf("%d approval messages reached the simulator, want 0", n)
	}

	again, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil || again.Duplicate || again.TaskID == first.TaskID {
		t.Fatalf("answer after the failed one: %+v, %v; want a new answer turn", again, err)
	}
	if f, evs := e.waitFinal(c, again.TaskID, 30*time.Second); f.Type != queue.EventAnswer || !ranTool(evs, "delete_file") {
		t.Fatalf("second answer's final %+v; %s", f, summarize(evs))
	}
	later := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "[[sim answer=done]] and now?"})
	if f, evs := e.waitFinal(c, later.TaskID, 30*time.Second); f.Type != queue.EventAnswer || f.Text != "done" {
		t.Fatalf("later message's final %+v; %s", f, summarize(evs))
	}
	if ra := e.record(req.TaskID).Approval; ra == nil || ra.AnsweredBy != again.TaskID {
		t.Errorf("request journal %+v, want answered by %s", ra, again.TaskID)
	}
}
