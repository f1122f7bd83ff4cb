package inbound

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/record"
)

// maxReasonBytes bounds the reason of one decision of an approval answer.
const maxReasonBytes = 1024

// validateAnswer checks the answer a of message m against the payload rules.
func validateAnswer(a *record.Answer, m Message) error {
	switch {
	case m.Text != "":
		return Invalid("text", "must be empty in an approval answer")
	case len(m.Images) > 0:
		return Invalid("images", "must be empty in an approval answer")
	case a.RequestTaskID == "":
		return Invalid("approval.request_task_id", "must not be empty")
	case len(a.Decisions) == 0:
		return Invalid("approval.decisions", "must answer at least one tool call")
	}
	if err := checkID("approval.request_task_id", a.RequestTaskID, true); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, d := range a.Decisions {
		f := fmt.Sprintf("approval.decisions[%d]", i)
		if err := checkID(f+".tool_call_id", d.ToolCallID, true); err != nil {
			return err
		}
		if seen[d.ToolCallID] {
			return Invalid(f+".tool_call_id", "%q is answered twice", d.ToolCallID)
		}
		seen[d.ToolCallID] = true
		if len(d.Reason) > maxReasonBytes || !utf8.ValidString(d.Reason) {
			return Invalid(f+".reason", "must be valid UTF-8 of at most %d bytes", maxReasonBytes)
		}
		if i := strings.IndexByte(d.Reason, 0); i >= 0 {
			return Invalid(f+".reason", "holds a NUL character (U+0000) at byte %d: %s", i, nulReason)
		}
	}
	switch a.Cause {
	case "", record.AnswerByUser, record.AnswerExpired, record.AnswerMovedOn:
	default:
		return Invalid("approval.cause", "%q: want user, expired or moved_on", a.Cause)
	}
	return nil
}

// AnswerAccepted is the accepted event of an answer turn: it says what was
// answered, and why.
func AnswerAccepted(m Message, id, otid string, pos int) record.ReplyEvent {
	a := m.Approval
	reason := ""
	if len(a.Decisions) > 0 {
		reason = a.Decisions[0].Reason
	}
	return record.ReplyEvent{TaskID: id, Otid: otid, MessageID: m.MessageID, Position: pos,
		Approval: &record.ApprovalEvent{RequestTaskID: a.RequestTaskID, Decision: approval.Summary(a.Decisions), Cause: a.Cause, Reason: reason}}
}
