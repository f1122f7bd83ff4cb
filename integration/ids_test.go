package integration

import (
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestChatsWithSeparatorsInIDsBothAnswered: chat "<x>:2" + message "3" and
// chat "<x>" + message "2:3" made one task id under the old rule (the second
// was dropped as a duplicate and its chat waited in the other's line). Both
// are answered now, each in its own conversation and nowhere else.
func TestChatsWithSeparatorsInIDsBothAnswered(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("ids", nil)
	base := e.conv("ids")
	ca := record.Conversation{Integration: base.Integration, ChatID: base.ChatID + ":2"}
	cb := base
	ra := e.enqueue(queue.Message{AgentID: agent, Conversation: ca, MessageID: "3", Text: "[[sim answer=for-A]] from A"})
	rb := e.enqueue(queue.Message{AgentID: agent, Conversation: cb, MessageID: "2:3", Text: "[[sim answer=for-B]] from B"})
	if ra.Duplicate || rb.Duplicate || ra.TaskID == rb.TaskID {
		t.Fatalf("one task for two chats: %+v %+v", ra, rb)
	}
	e.startWorker("w1")
	for _, tc := range []struct {
		c      record.Conversation
		res    queue.EnqueueResult
		answer string
		other  string
	}{{ca, ra, "for-A", rb.TaskID}, {cb, rb, "for-B", ra.TaskID}} {
		final, evs := e.waitFinal(tc.c, tc.res.TaskID, 30*time.Second)
		if final.Type != record.EventAnswer || final.Text != tc.answer {
			t.Fatalf("chat %q: final %s %q; %s", tc.c.ChatID, final.Type, final.Text, summarize(evs))
		}
		if other := e.events(tc.c, tc.other); len(other) != 0 {
			t.Errorf("chat %q holds %d events of the other chat's task: %s", tc.c.ChatID, len(other), summarize(other))
		}
	}
	if n := len(e.sim.UserMessages(agent)); n != 2 {
		t.Fatalf("agent got %d user messages, want 2", n)
	}
}
