package approval

import (
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/record"
)

// Pending is an approval request as lettaq keeps it (its JSON is what Redis holds).
type Pending struct {
	RequestTaskID       string              `json:"request_task_id"`
	Otid                string              `json:"otid"`
	RunID               string              `json:"run_id,omitempty"`
	AgentID             string              `json:"agent_id"`
	Conversation        record.Conversation `json:"conversation"`
	LettaConversationID string              `json:"letta_conversation_id,omitempty"`
	Queue               string              `json:"queue,omitempty"`
	// Scope names the Letta thread the request blocks (see Part.Scope):
	// "chat:<integration>:<chat>", "conv:<id>" or "agent".
	Scope string `json:"scope"`
	// Calls are every tool call waiting for an answer; all are answered in
	// one message.
	Calls       []record.ToolEvent `json:"calls"`
	RequestedAt time.Time          `json:"requested_at"`
	ExpiresAt   time.Time          `json:"expires_at,omitzero"`
	// AnsweredBy is the answer turn's task id once one ran; AnsweredAt,
	// Decision ("approved", "denied", "mixed") and Cause say how.
	AnsweredBy string    `json:"answered_by,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	Decision   string    `json:"decision,omitempty"`
	Cause      string    `json:"cause,omitempty"`
	// FailedAnswers are the answer turns that gave up before their answer
	// reached Letta (e.g. Letta down for every retry): the request stays
	// pending, and its next answer is a turn of its own (NextAnswerTaskID).
	FailedAnswers []string `json:"failed_answers,omitempty"`
}

// NextAnswerTaskID is the task id of the request's next answer (or of its expiry):
// AnswerTaskID of the request, or, after failed answers, AnswerTaskIDAfter.
func (p *Pending) NextAnswerTaskID() string {
	return AnswerTaskIDAfter(p.RequestTaskID, len(p.FailedAnswers))
}

// Record is what the journal keeps of the request (TurnRecord.Approval).
func (p *Pending) Record() *record.ApprovalRecord {
	r := &record.ApprovalRecord{RequestTaskID: p.RequestTaskID, RequestedAt: p.RequestedAt, ExpiresAt: p.ExpiresAt,
		AnsweredBy: p.AnsweredBy, AnsweredAt: p.AnsweredAt, Decision: p.Decision, Cause: p.Cause}
	for _, c := range p.Calls {
		r.Calls = append(r.Calls, c.Name+" ("+c.CallID+")")
	}
	if !p.AnsweredAt.IsZero() {
		r.Waited = max(p.AnsweredAt.Sub(p.RequestedAt), 0)
	}
	return r
}

// Calls lists every pending call of a run's approval request, each once.
func Calls(tr agentclient.Transcript) []record.ToolEvent {
	var calls []record.ToolEvent
	seen := map[string]bool{}
	for _, s := range tr.PendingApprovals() {
		if s.ToolCallID != "" && seen[s.ToolCallID] {
			continue
		}
		seen[s.ToolCallID] = true
		calls = append(calls, record.ToolEvent{Name: s.ToolName, CallID: s.ToolCallID, Arguments: s.Arguments, Status: record.ToolStatusCall})
	}
	return calls
}
