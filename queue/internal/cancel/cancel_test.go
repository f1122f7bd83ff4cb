package cancel

import (
	"io"
	"log/slog"
	"net/http"
	"sync"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/record"
)

type call struct{ conv, runID string }

// fakeRun is a run at Letta whose cancel calls arrive on calls, answered by answer.
type fakeRun struct {
	mu     sync.Mutex
	runID  string
	calls  chan call
	answer func(call) error
}

func (r *fakeRun) RunID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.runID
}

func (r *fakeRun) CancelRun(conv, runID string) error {
	c := call{conv, runID}
	r.calls <- c
	if r.answer != nil {
		return r.answer(c)
	}
	return nil
}

type rec = record.CancelRecord

var discard = slog.New(slog.NewTextHandler(io.Discard, nil))

// On a conversation, a cancel noted before the thread is known asks Letta once the thread
// is; the first note wins; a second thread report asks nothing more.
func TestConversationCancelAsksOnceTheThreadIsKnown(t *testing.T) {
	run := &fakeRun{calls: make(chan call, 4)}
	var c Turn
	if c.Asked() != nil {
		t.Fatal("a cancel before any was noted")
	}
	if !c.Note(rec{By: "a"}, run, discard) || c.Note(rec{By: "b"}, run, discard) {
		t.Fatal("Note: the first note must say first, the second not")
	}
	if got := c.Asked(); got == nil || got.By != "a" {
		t.Fatalf("asked %+v, want the first note", got)
	}
	if len(run.calls) != 0 {
		t.Fatal("Letta asked before the thread is known")
	}
	c.ThreadKnown("conv-1", run, discard)
	if got := <-run.calls; got != (call{"conv-1", ""}) {
		t.Errorf("asked Letta %+v, want the conversation's cancel", got)
	}
	c.ThreadKnown("conv-1", run, discard)
	c.RunKnown(run, discard)
	if refused, recovered := c.End(); refused || recovered {
		t.Errorf("End: refused %v recovered %v, want neither", refused, recovered)
	}
	if len(run.calls) != 0 {
		t.Errorf("Letta asked %d more times, want once in all", len(run.calls))
	}
}

// On the agent endpoints the cancel waits for the run's id (never the agent's cancel without
// it); a 409 while the run's id is not known yet asks again once it is; after End nothing is
// asked.
func TestAgentCancelWaitsForTheRun(t *testing.T) {
	run := &fakeRun{calls: make(chan call, 4)}
	var c Turn
	c.ThreadKnown("", run, discard)
	c.Note(rec{By: "a"}, run, discard)
	if len(run.calls) != 0 {
		t.Fatal("the agent's cancel asked without the run's id")
	}
	run.mu.Lock()
	run.runID = "run-1"
	run.mu.Unlock()
	c.RunKnown(run, discard)
	if got := <-run.calls; got != (call{"", "run-1"}) {
		t.Errorf("asked Letta %+v, want the agent's cancel of run-1", got)
	}

	// A conversation whose send is on its way: Letta has no run yet (409), the cancel is
	// asked again once the run is known.
	conflict := &agentclient.Error{StatusCode: http.StatusConflict}
	second := make(chan struct{})
	run2 := &fakeRun{calls: make(chan call, 4)}
	run2.answer = func(c call) error {
		if c.runID == "" {
			defer close(second)
			return conflict
		}
		return nil
	}
	var c2 Turn
	c2.Note(rec{By: "a"}, run2, discard)
	c2.ThreadKnown("", run2, discard) // agent endpoints, no run yet: waits
	if len(run2.calls) != 0 {
		t.Fatal("asked without a run on the agent endpoints")
	}
	var c3 Turn
	c3.Note(rec{By: "a"}, run2, discard)
	c3.ThreadKnown("conv-2", run2, discard)
	<-run2.calls
	<-second // the 409 came back: the cancel waits for the run
	run2.mu.Lock()
	run2.runID = "run-2"
	run2.mu.Unlock()
	c3.RunKnown(run2, discard)
	<-run2.calls // asked again
	c3.End()
	c3.RunKnown(run2, discard)
	if len(run2.calls) != 0 {
		t.Error("Letta asked after End")
	}
}

// RefusedSend and Recovered are what End reports.
func TestEndReports(t *testing.T) {
	var c Turn
	c.RefusedSend()
	c.Recovered(true)
	if refused, recovered := c.End(); !refused || !recovered {
		t.Errorf("End: refused %v recovered %v, want both", refused, recovered)
	}
}
