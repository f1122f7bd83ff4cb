package continuation_test

import (
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// An approval answer whose response is lost after the server stored it is
// found in history by its approval_response_message's otid: followed, not
// sent again.
func TestApprovalAnswerFoundInHistory(t *testing.T) {
	sc := &lettasim.Script{Steps: []lettasim.Step{{Kind: lettasim.ApprovalRequest, ToolName: "delete_file"},
		{Kind: lettasim.Assistant, Text: "deleted"}}}
	e := newEnv(t, sc)
	st := agentclient.NewStreamState()
	if d := e.run(t, e.turn("delete it"), st, 1); d.StopReason != "requires_approval" {
		t.Fatalf("decision %+v", d)
	}
	call := st.Snapshot().Transcript.PendingApprovals()[0].ToolCallID
	e.sim.SetFault(e.agent, lettasim.Fault{Status5xxAfterStore: 502})
	ans := e.turn("")
	ans.Approvals = []agentclient.ApprovalAnswer{{ToolCallID: call, Approve: true}}
	st = agentclient.NewStreamState()
	d := e.run(t, ans, st, 1)
	if d.Outcome != continuation.Completed || d.Evidence != continuation.EvidenceHistory || d.Resend == continuation.ResendSent {
		t.Fatalf("decision %+v", d)
	}
	if st.Answer() != "deleted" {
		t.Errorf("answer %q", st.Answer())
	}
}
