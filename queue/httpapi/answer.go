package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"reflect"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// answerBody is the HTTP form of an answer to an approval request, POSTed
// to the enqueue endpoint as {"answer": {…}} (queue.Client.AnswerApproval):
//
//	{"answer": {"request": "turn:telegram:42:9876",   the task id (or otid) of the turn that asked
//	            "approve": false, "reason": "not today",   every pending call alike, or
//	            "decisions": [{"tool_call_id": "call-1", "approve": true}, …]},   call by call
//	 "message_id": "cb-77", "sender_id": "user-42"}   optional
type answerBody struct {
	Answer *struct {
		Request   string                   `json:"request"`
		Approve   bool                     `json:"approve"`
		Reason    string                   `json:"reason,omitempty"`
		Decisions []record.ApprovalVerdict `json:"decisions,omitempty"`
	} `json:"answer"`
	MessageID string `json:"message_id,omitempty"`
	SenderID  string `json:"sender_id,omitempty"`
}

// answerFields are the keys an answer's body may hold.
var answerFields = codec.FieldsOf(reflect.TypeFor[answerBody]())

// answer handles body when it is an answerBody, and reports whether it was
// one.
func answer(c *queue.Client, w http.ResponseWriter, r *http.Request, body []byte) bool {
	var p answerBody
	if json.Unmarshal(body, &p) != nil || p.Answer == nil {
		return false
	}
	if err := answerRawFault(body); err != nil {
		ve, _ := queue.IsValidationError(err)
		httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
		return true
	}
	a := p.Answer
	for _, f := range []struct{ name, v string }{{"answer.request", a.Request}, {"message_id", p.MessageID}, {"sender_id", p.SenderID}} {
		if err := validationError(payloadcheck.CheckID(f.name, f.v, f.name == "answer.request")); err != nil {
			ve, _ := queue.IsValidationError(err)
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return true
		}
	}
	res, err := c.AnswerApproval(r.Context(), queue.ApprovalReply{Request: a.Request, Approve: a.Approve, Reason: a.Reason,
		Decisions: a.Decisions, MessageID: p.MessageID, SenderID: p.SenderID})
	if ve, ok := queue.IsValidationError(err); ok {
		httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
		return true
	}
	switch {
	case errors.Is(err, queue.ErrNoApproval):
		httpJSON(w, http.StatusNotFound, map[string]string{"error": err.Error(), "field": "answer.request"})
	case err != nil:
		httpJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
	default:
		httpJSON(w, http.StatusAccepted, res)
	}
	return true
}

// answerRawFault refuses an answer body with a key given twice, or an id
// that encoding/json decoded with replacement (see payloadcheck).
func answerRawFault(body []byte) error {
	if d := codec.FindKeyFault(body, answerFields); d != nil {
		return validationError(payloadcheck.KeyFault(d))
	}
	var raw struct {
		Answer struct {
			Request json.RawMessage `json:"request"`
		} `json:"answer"`
		MessageID json.RawMessage `json:"message_id"`
		SenderID  json.RawMessage `json:"sender_id"`
	}
	_ = json.Unmarshal(body, &raw) // cannot fail where decoding answerBody did not
	for _, f := range []struct {
		name string
		raw  json.RawMessage
	}{{"answer.request", raw.Answer.Request}, {"message_id", raw.MessageID}, {"sender_id", raw.SenderID}} {
		if !payloadcheck.ValidString(f.raw) {
			return invalid(f.name, "is not valid UTF-8 (or holds an unpaired surrogate escape)")
		}
	}
	return nil
}
