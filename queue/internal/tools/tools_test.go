package tools

import (
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
)

// A call is told once it has a name, its return once, with success when the return names
// no status; a step without a call id is keyed by its index; the calls keep their order.
func TestCallsTellEachOnce(t *testing.T) {
	var cs Calls
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	call := agentclient.Step{Kind: agentclient.StepToolCall, ToolCallID: "c1"}
	if _, tell, _ := cs.Step(call, 0, t0, "success"); tell {
		t.Error("a call without a name told")
	}
	call.ToolName = "search"
	if c, tell, _ := cs.Step(call, 0, t0.Add(time.Second), "success"); !tell || c.Name != "search" || !c.Called.Equal(t0) {
		t.Errorf("the named call: told %v, %+v", tell, c)
	}
	if _, tell, _ := cs.Step(call, 0, t0, "success"); tell {
		t.Error("a call told twice")
	}
	ret := agentclient.Step{Kind: agentclient.StepToolReturn, ToolCallID: "c1"}
	c, _, tellRet := cs.Step(ret, 1, t0.Add(2*time.Second), "success")
	if !tellRet || c.Status != "success" || c.Returned.Sub(c.Called) != 2*time.Second {
		t.Errorf("the return: told %v, %+v", tellRet, c)
	}
	if _, _, tellRet := cs.Step(ret, 1, t0, "success"); tellRet {
		t.Error("a return told twice")
	}
	anon := agentclient.Step{Kind: agentclient.StepToolCall, ToolName: "calc"}
	cs.Step(anon, 3, t0, "success")
	cs.Step(anon, 3, t0, "success")
	if all := cs.All(); len(all) != 2 || all[0].Name != "search" || all[1].Name != "calc" {
		t.Errorf("calls %+v, want search then calc", all)
	}
}
