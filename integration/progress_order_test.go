package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Progress events leave in the order things happen at the agent: what it said before a tool
// call comes before the call (even while the delta buffer would still hold it), and no other
// phase is announced while the tool runs: its return comes before the phase it leads to.
func TestProgressEventsInOrder(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("order", &lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I should look this up."},
		{Kind: lettasim.ToolCall, ToolName: "web_search"},
		{Kind: lettasim.ToolReturn, Text: "found", Delay: simDur(600 * time.Millisecond)},
		{Kind: lettasim.Reasoning, Text: "I have what I need."},
		{Kind: lettasim.Assistant, Text: "Here it is."},
	}})
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Timing.DeltaMaxAge = time.Minute // text without a newline waits for a flush
		c.Timing.HeartbeatInterval = 100 * time.Millisecond
	})
	c := e.conv("order")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "look it up", Conversation: c})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v; events %s", final, summarize(evs))
	}
	index := func(match func(record.ReplyEvent) bool) int {
		for i, ev := range evs {
			if match(ev) {
				return i
			}
		}
		return -1
	}
	said := index(func(ev record.ReplyEvent) bool {
		return ev.Type == record.EventAnswerDelta && ev.Narration && strings.Contains(ev.Text, "look this up")
	})
	call := index(func(ev record.ReplyEvent) bool {
		return ev.Type == record.EventTool && ev.Tool.Status == record.ToolStatusCall
	})
	ret := index(func(ev record.ReplyEvent) bool {
		return ev.Type == record.EventTool && ev.Tool.Status == record.ToolStatusSuccess
	})
	if said < 0 || call < 0 || ret < 0 || !(said < call && call < ret) {
		t.Fatalf("narration %d, call %d, return %d: want them in that order; events %s", said, call, ret, summarize(evs))
	}
	for _, ev := range evs[call:ret] {
		if ev.Type == record.EventPhase && ev.Phase != record.PhaseToolRunning {
			t.Errorf("phase %q announced while the tool runs; events %s", ev.Phase, summarize(evs))
		}
		if ev.Type == record.EventAnswerDelta {
			t.Errorf("text %q while the tool runs; events %s", ev.Text, summarize(evs))
		}
	}
}
