package integration

import (
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Every log line about a turn carries its task id, its otid and, once the run is known, its
// run id: here a turn whose stream is cut, so the continuation logs too.
func TestEveryTurnLogLineCarriesItsIDs(t *testing.T) {
	e := newEnv(t)
	var out syncBuffer
	stop := e.startWorker("A", func(c *queue.WorkerConfig) {
		c.Logger = slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	})
	agent := e.sim.CreateAgent("logs", nil)
	c := e.conv("logs")
	r := e.enqueue(queue.Message{AgentID: agent, Conversation: c,
		Text: "[[sim disconnect_after=2 answer_delay=" + simDur(200*time.Millisecond).String() + "]] hi"})
	final, evs := e.waitFinal(c, r.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %s; %s", final.Type, summarize(evs))
	}
	e.settled()
	stop()
	runID := final.RunID
	var turnLines, withRun int
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("not JSON: %s", l)
		}
		if m["component"] == "asynq" || m["component"] == "takeover" || strings.HasPrefix(m["msg"].(string), "worker ") {
			continue // the worker's own lines
		}
		turnLines++
		for _, k := range []string{"task_id", "otid", "run_id"} {
			if n := strings.Count(l, `"`+k+`":`); n != 1 {
				t.Errorf("%s appears %d times: %s", k, n, l)
			}
		}
		if m["task_id"] != r.TaskID || m["otid"] != r.Otid {
			t.Errorf("line names another turn: %s", l)
		}
		if m["run_id"] == runID {
			withRun++
		}
	}
	// At least: the stream was lost (continuation), and the turn finished.
	if turnLines < 2 || withRun < 2 {
		t.Fatalf("%d turn lines, %d with run id %s:\n%s", turnLines, withRun, runID, out.String())
	}
}
