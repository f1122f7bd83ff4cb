package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestRetriedSendNamesItsCause: a send answered 503 twice (the first send and its resend) is
// retried; the error Asynq keeps for the monitor (LastErr) names the 503 first, not only the
// "otid not in the agent's history" that the lookup found after it.
func TestRetriedSendNamesItsCause(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("unavailable", nil)
	e.sim.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503, Times: 2})
	c := e.conv("lasterr")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})

	waitState(t, e, res.TaskID, asynq.TaskStateRetry, 30*time.Second)
	info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(info.LastErr, "send failed: ") || !strings.Contains(info.LastErr, "503") ||
		!strings.Contains(info.LastErr, "not in the agent's history") || info.Retried != 1 {
		t.Errorf("retried task: retried %d, last error %q; want the 503 named first", info.Retried, info.LastErr)
	}
	if final, _ := e.waitFinal(c, res.TaskID, 60*time.Second); final.Type != record.EventAnswer {
		t.Errorf("final event %+v, want the answer", final)
	}
	if n := len(e.sim.UserMessages(agent)); n != 1 {
		t.Errorf("agent stored %d user messages, want 1", n)
	}
}
