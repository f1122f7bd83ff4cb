package record

// Causes of an answer (Answer.Cause): a person's answer (queue's
// Client.AnswerApproval sends AnswerByUser), or the worker's own denial of
// a request that expired or that a new message moved on from.
const (
	AnswerByUser  = "user"     // a person answered
	AnswerExpired = "expired"  // nobody answered in time
	AnswerMovedOn = "moved_on" // a new message came (policy deny)
)

// ApprovalVerdict answers one pending tool call: approve or deny (the
// payload's "decisions").
type ApprovalVerdict struct {
	ToolCallID string `json:"tool_call_id"`
	Approve    bool   `json:"approve"`
	Reason     string `json:"reason,omitempty"`
}

// Answer is the payload of an approval answer turn ("approval"):
//
//	{"request_task_id": "turn:web:42:7", "cause": "user",
//	 "decisions": [{"tool_call_id": "call-1", "approve": false, "reason": "not today"}]}
//
// RequestTaskID is the task id of the turn that asked; Cause is AnswerByUser
// (default), AnswerExpired or AnswerMovedOn.
type Answer struct {
	RequestTaskID string            `json:"request_task_id"`
	Decisions     []ApprovalVerdict `json:"decisions"`
	Cause         string            `json:"cause,omitempty"`
}
