package httpapi

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// maxNotifyBodyBytes bounds the body NotifyHandler reads: a text of
// queue.MaxNotifyTextBytes with every character escaped (\u0001, 6 bytes for 1),
// and room for the chat and the key.
const maxNotifyBodyBytes = 6*queue.MaxNotifyTextBytes + 8<<10

// notifyFields are the keys a notify body may hold ("chat" a string, or
// an object of these two).
var notifyFields = codec.Fields{"chat": codec.Fields{"integration": nil, "chat_id": nil}, "text": nil, "key": nil}

// notifyBody is the JSON NotifyHandler takes, each value as written
// (checked for invalid UTF-8 before it is decoded: encoding/json would
// rewrite it to U+FFFD, and a chat id so rewritten names another chat).
type notifyBody struct {
	Chat json.RawMessage `json:"chat"`
	Text json.RawMessage `json:"text"`
	Key  json.RawMessage `json:"key"`
}

// decodeNotice parses a notify body; a missing key is minted
// (a random UUID). The error is a *ValidationError naming the field.
func decodeNotice(body []byte) (queue.Notice, error) {
	if d := codec.FindKeyFault(body, notifyFields); d != nil {
		if d.Unknown {
			return queue.Notice{}, invalid(d.Path, "is not a field of a notify (chat, text, key; unknown fields are refused: a misspelled field would be dropped)")
		}
		return queue.Notice{}, invalid(d.Path, "is given more than once (a notify names each key once)")
	}
	var b notifyBody
	if err := json.Unmarshal(body, &b); err != nil {
		return queue.Notice{}, invalid("", "not a JSON object {\"chat\": \"integration:chat_id\", \"text\": …, \"key\": …}: %v", err)
	}
	var n queue.Notice
	for _, f := range []struct {
		name string
		raw  json.RawMessage
		dst  *string
	}{{"text", b.Text, &n.Text}, {"key", b.Key, &n.Key}} {
		if len(f.raw) == 0 || string(f.raw) == "null" {
			continue
		}
		if !payloadcheck.ValidString(f.raw) {
			return queue.Notice{}, invalid(f.name, "is not valid UTF-8 (or holds an unpaired surrogate escape)")
		}
		if json.Unmarshal(f.raw, f.dst) != nil {
			return queue.Notice{}, invalid(f.name, "must be a JSON string")
		}
	}
	switch {
	case len(b.Chat) == 0 || string(b.Chat) == "null":
		return queue.Notice{}, invalid("chat", "is required: \"integration:chat_id\" or {\"integration\": …, \"chat_id\": …}")
	case b.Chat[0] == '"':
		var s string
		if !payloadcheck.ValidString(b.Chat) || json.Unmarshal(b.Chat, &s) != nil {
			return queue.Notice{}, invalid("chat", "is not valid UTF-8 (or holds an unpaired surrogate escape)")
		}
		integration, chat, ok := strings.Cut(s, ":")
		if !ok {
			return queue.Notice{}, invalid("chat", "%q is not integration:chat_id", s)
		}
		n.Chat = record.Conversation{Integration: integration, ChatID: chat}
	default:
		var raw struct {
			Integration json.RawMessage `json:"integration"`
			ChatID      json.RawMessage `json:"chat_id"`
		}
		if json.Unmarshal(b.Chat, &raw) != nil {
			return queue.Notice{}, invalid("chat", "want \"integration:chat_id\" or {\"integration\": …, \"chat_id\": …}")
		}
		for _, f := range []struct {
			raw json.RawMessage
			dst *string
		}{{raw.Integration, &n.Chat.Integration}, {raw.ChatID, &n.Chat.ChatID}} {
			if len(f.raw) == 0 {
				continue
			}
			if !payloadcheck.ValidString(f.raw) || json.Unmarshal(f.raw, f.dst) != nil {
				return queue.Notice{}, invalid("chat", "integration and chat_id must be JSON strings of valid UTF-8")
			}
		}
	}
	if n.Key == "" {
		n.Key = uuid.NewString()
	}
	return n, n.Validate()
}

// NotifyHandler returns a handler that writes the notify POSTed as
// JSON into its chat (queue.Client.Notify):
//
//	{"chat": "telegram:42" or {"integration": …, "chat_id": …}, "text": "…", "key": "…"}
//
// "key" is optional: without it one is minted (a retry of that POST is
// then a second message; send a key to make retries safe). It answers
//
//	202 {"task_id": "notify:<key>", "id": "<entry id>", "key": "…", "duplicate": false}
//	202 the same, "duplicate": true   the key was written before with this text: nothing new
//	400 {"error": "…", "field": "chat"|"text"|"key"|…}   invalid notify
//	409 {"error": "…", "field": "key"}  the key was used in this chat for another text
//	405, 413, 415                      wrong method, body too large, not application/json
//	500 {"error": "…"}                 Redis trouble: try again (with the same key)
func NotifyHandler(c *queue.Client) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, ok := readJSONPost(w, r, maxNotifyBodyBytes)
		if !ok {
			return
		}
		n, err := decodeNotice(body)
		if ve, ok := queue.IsValidationError(err); ok {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return
		}
		res, err := c.Notify(r.Context(), n)
		if ve, ok := queue.IsValidationError(err); ok {
			httpJSON(w, http.StatusBadRequest, map[string]string{"error": ve.Error(), "field": ve.Field})
			return
		}
		var conflict *queue.NotifyKeyConflictError
		switch {
		case errors.As(err, &conflict):
			httpJSON(w, http.StatusConflict, map[string]string{"error": conflict.Error(), "field": "key"})
		case err != nil:
			httpJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error(), "key": n.Key})
		default:
			httpJSON(w, http.StatusAccepted, res)
		}
	})
}
