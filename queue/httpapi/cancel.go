package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// maxCancelBodyBytes bounds the body CancelHandler reads.
const maxCancelBodyBytes = 64 << 10

// cancelBody is the JSON CancelHandler takes: queue.CancelRequest, whose
// chat may also be written "integration:chat_id".
type cancelBody struct {
	queue.CancelRequest
	Chat json.RawMessage `json:"chat,omitempty"`
}

// parseChat parses "integration:chat_id" (the chat id may hold colons).
func parseChat(s string) (record.Conversation, error) {
	integration, chat, ok := strings.Cut(s, ":")
	if !ok || integration == "" || chat == "" {
		return record.Conversation{}, invalid("chat", "%q is not integration:chat_id", s)
	}
	c := record.Conversation{Integration: integration, ChatID: chat}
	return c, c.Validate()
}

// CancelHandler returns the handler of POST /cancel: it stops the turns
// named by the JSON POSTed (queue.Client.Cancel):
//
//	{"task_id": "turn:…"} | {"otid": "…"} | {"chat": "telegram:42" or {"integration": …, "chat_id": …}, "agent_id": "agent-…", "all": true}
//	optional: "by", "reason" (kept in the journal)
//
// and answers
//
//	200 {"turns": [{"task_id", "otid", "status": "cancelled"|"cancelling"|"answered", "outcome"}]}   a turn was stopped (or its worker asked to)
//	409 {"error": "…", "turns": […]}   every turn named had ended already: nothing changed
//	404 {"error": "…"}                 no such turn (or the chat has none running or waiting)
//	400 {"error": "…", "field": "…"}   the request names no turn, or more than one way
//	405, 413, 415                      wrong method, body larger than 64 KiB, not application/json
//	500 {"error": "…"}                 Redis trouble: try again
func CancelHandler(c *queue.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readJSONPost(w, r, maxCancelBodyBytes)
		if !ok {
			return
		}
		var b cancelBody
		if err := json.Unmarshal(body, &b); err != nil {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": "not a cancel request: " + err.Error()})
			return
		}
		req := b.CancelRequest
		if len(b.Chat) > 0 && string(b.Chat) != "null" {
			var s string
			var err error
			var conv record.Conversation
			if json.Unmarshal(b.Chat, &s) == nil {
				conv, err = parseChat(s)
			} else if err = json.Unmarshal(b.Chat, &conv); err != nil {
				err = invalid("chat", "want \"integration:chat_id\" or {\"integration\": …, \"chat_id\": …}")
			}
			if ve, ok := queue.IsValidationError(err); ok {
				httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
				return
			}
			req.Chat = &conv
		}
		if req.By == "" {
			req.By = "http"
		}
		res, err := c.Cancel(r.Context(), req)
		if ve, ok := queue.IsValidationError(err); ok {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return
		}
		switch {
		case errors.Is(err, queue.ErrNotFound):
			httpJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
		case err != nil:
			httpJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
		case !res.Stopped():
			httpJSON(w, http.StatusConflict, map[string]any{"error": "already answered: nothing to cancel", "turns": res.Turns})
		default:
			httpJSON(w, http.StatusOK, res)
		}
	})
}
