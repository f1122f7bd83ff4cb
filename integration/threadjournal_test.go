package integration

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// The thread a turn talks to is in the journal before its message is sent
// (with the intent, in the same round trip): a worker that dies right after
// the send leaves the thread to the next attempt, which then looks for the
// otid in that thread even if the thread mode changed meanwhile, instead
// of searching another thread, finding nothing and sending again.
func TestThreadJournaledBeforeTheSend(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	agent := e.sim.CreateAgent("thread", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Thinking a while.", Delay: simDur(3 * time.Second)},
		{Kind: lettasim.Assistant, Text: "done"},
	}})
	e.startWorker("w1")
	c := e.conv("thread")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "hi", Conversation: c, MessageID: "m1"})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := e.sim.WaitOtid(ctx, res.Otid); err != nil {
		t.Fatal(err)
	}
	rec, err := e.journal.Get(ctx, res.TaskID) // as it is now, finished or not
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("at the send: %s", describeAttempts(rec))
	if rec.ThreadMode != string(queue.ThreadConversation) || rec.LettaConversationID == "" {
		t.Fatalf("at the send, the journal has thread mode %q, conversation %q: a retry after a mode change would search another thread",
			rec.ThreadMode, rec.LettaConversationID)
	}
	final, _ := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v", final)
	}
}
