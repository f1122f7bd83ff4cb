package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A message with images: the simulator receives them as content parts next
// to the text (a URL and base64 data); an image it cannot fetch is a
// permanent failure named by its URL, archived once, never sent again.
func TestImageTurns(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("img", nil)
	c := e.conv("img")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "look",
		Images: []queue.Image{{URL: "https://images.example.com/cat.png"}, {MediaType: "image/png", Data: "iVBORw0KGgo="}}})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || !strings.Contains(final.Text, "look") {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	got := e.sim.UserMessages(agent)
	if len(got) != 1 || got[0].Images != 2 || got[0].Text != "look" {
		t.Fatalf("simulator received %+v", got)
	}

	bad := "https://broken.invalid/x.png"
	res2 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "and this",
		Images: []queue.Image{{URL: bad}}})
	final, evs = e.waitFinal(c, res2.TaskID, 20*time.Second)
	if final.Type != record.EventError || !final.Permanent || !strings.HasPrefix(final.Text, "the server could not use the message's images ("+bad+")") {
		t.Fatalf("bad image: %+v; %s", final, summarize(evs))
	}
	e.settled()
	info, err := e.insp.GetTaskInfo(e.queue, res2.TaskID)
	if err != nil || info.State.String() != "archived" || info.Retried != 0 || !strings.Contains(info.LastErr, bad) {
		t.Fatalf("task %+v %v, want archived at once naming the URL", info, err)
	}
	if n := countFinal(e.events(c, res2.TaskID)); n != 1 {
		t.Errorf("%d final events", n)
	}
	if n := len(e.sim.UserMessages(agent)); n != 1 {
		t.Errorf("the simulator stored %d messages, want 1 (the refused one stores nothing)", n)
	}
	if rec := e.record(res2.TaskID); len(rec.Attempts) != 1 || rec.Outcome != record.OutcomeFailed {
		t.Errorf("journal: %s", describeAttempts(rec))
	}
	// The chat goes on.
	res3 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m3", Text: "hello"})
	if final, _ := e.waitFinal(c, res3.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("after the bad image: %+v", final)
	}
}
