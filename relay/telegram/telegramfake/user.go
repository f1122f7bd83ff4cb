package telegramfake

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// UserPath is where Handler serves the user's side over HTTP, so that a
// person (or a test in another process) can play the user from a terminal:
//
//	POST <UserPath>send      chat_id, text: the user writes (an update the bot takes by getUpdates or its webhook)
//	POST <UserPath>press     chat_id, message_id, data: the user presses an inline button
//	GET  <UserPath>messages  chat_id: the chat as the user sees it, as JSON (POST too)
//
// Parameters come as a form (curl -d) or a query string; chat_id defaults
// to UserChat. These paths take no token: the fake serves them only to
// whoever reaches its listener.
const UserPath = "/user/"

// UserChat is the private chat of the user's side over HTTP when a request
// names none (the chat's id is the user's id, as in Telegram).
const UserChat = 42

// ShownMessage is a message as GET <UserPath>messages lists it.
type ShownMessage struct {
	ID      int           `json:"message_id"`
	From    string        `json:"from"` // "bot" or "user"
	Text    string        `json:"text"`
	Edits   int           `json:"edits"`
	Buttons []ShownButton `json:"buttons,omitempty"`
}

// ShownButton is an inline button: what it says and the data a press sends.
type ShownButton struct {
	Text string `json:"text"`
	Data string `json:"data"`
}

func (s *Server) serveUser(w http.ResponseWriter, r *http.Request, what string) {
	if err := r.ParseForm(); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	chat := int64(UserChat)
	if raw := strings.TrimSpace(r.Form.Get("chat_id")); raw != "" {
		id, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || id == 0 {
			http.Error(w, fmt.Sprintf("chat_id %q is not a chat id (a non-zero integer; a group's is negative)", raw), http.StatusBadRequest)
			return
		}
		chat = id
	}
	post := r.Method == http.MethodPost
	switch {
	case what == "send" && post:
		text := r.Form.Get("text")
		if strings.TrimSpace(text) == "" {
			http.Error(w, "text is empty: send -d text=...", http.StatusBadRequest)
			return
		}
		upd, id := s.SendText(From{Chat: chat}, text)
		writeJSON(w, map[string]any{"update_id": upd, "message_id": id, "chat_id": chat})
	case what == "press" && post:
		id, err := strconv.Atoi(r.Form.Get("message_id"))
		data := r.Form.Get("data")
		if err != nil || id <= 0 || data == "" {
			http.Error(w, "want message_id (a message of the chat) and data (a button's, as messages lists it)", http.StatusBadRequest)
			return
		}
		writeJSON(w, map[string]any{"callback_query_id": s.Press(chat, id, data)})
	case what == "messages":
		writeJSON(w, s.Shown(chat))
	default:
		http.Error(w, "the user's side: POST "+UserPath+"send, POST "+UserPath+"press, GET "+UserPath+"messages", http.StatusNotFound)
	}
}

// Shown returns chat's visible messages as the user's side lists them.
func (s *Server) Shown(chat int64) []ShownMessage {
	out := []ShownMessage{}
	for _, m := range s.Messages(chat) {
		sm := ShownMessage{ID: m.ID, From: "user", Text: m.Text, Edits: m.Edits}
		if m.FromBot {
			sm.From = "bot"
		}
		for _, row := range m.Keyboard {
			for _, b := range row {
				sm.Buttons = append(sm.Buttons, ShownButton{Text: b.Text, Data: b.CallbackData})
			}
		}
		out = append(out, sm)
	}
	return out
}

// writeJSON answers v as indented JSON (read in a terminal).
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
