package telegramfake

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-telegram/bot/models"
)

// User is who plays the user in a test.
var User = models.User{ID: 42, FirstName: "Ada", Username: "ada"}

// From is a message's origin for SendText and SendPhoto.
type From struct {
	Chat   int64 // < 0: a supergroup
	Thread int   // a forum topic, or 0
	User   models.User
	// ReplyTo is the id of the message replied to (0: none).
	ReplyTo int
}

func (s *Server) userMsg(f From) *models.Message {
	if f.User.ID == 0 {
		f.User = User
	}
	ms := s.msgs[f.Chat]
	m := &Msg{Chat: f.Chat, ID: len(ms) + 1, Thread: f.Thread}
	s.msgs[f.Chat] = append(ms, m)
	out := &models.Message{ID: m.ID, MessageThreadID: f.Thread, IsTopicMessage: f.Thread != 0, From: &f.User, Date: int(time.Now().Unix()),
		Chat: models.Chat{ID: f.Chat, Type: chatType(f.Chat), IsForum: f.Thread != 0}}
	if f.ReplyTo > 0 && f.ReplyTo <= len(ms) {
		out.ReplyToMessage = ms[f.ReplyTo-1].model()
	}
	return out
}

// SendText makes the user send text; it returns the update's id and the
// message's id. Commands and @mentions get their entities.
func (s *Server) SendText(f From, text string) (update int64, msgID int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.userMsg(f)
	m.Text = text
	s.msgs[f.Chat][m.ID-1].Text = text
	if len(text) > 0 && text[0] == '/' {
		n := len(text)
		if i := bytes.IndexAny([]byte(text), " \n"); i > 0 {
			n = i
		}
		m.Entities = append(m.Entities, models.MessageEntity{Type: models.MessageEntityTypeBotCommand, Offset: 0, Length: utf16Len(text[:n])})
	}
	if i := bytes.Index([]byte(text), []byte("@"+BotUsername)); i >= 0 {
		m.Entities = append(m.Entities, models.MessageEntity{Type: models.MessageEntityTypeMention, Offset: utf16Len(text[:i]), Length: utf16Len("@" + BotUsername)})
	}
	return s.push(models.Update{Message: m}), m.ID
}

// SendPhoto makes the user send a photo (its bytes served by getFile and
// the file path) with a caption.
func (s *Server) SendPhoto(f From, photo []byte, caption string) (update int64, msgID int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.userMsg(f)
	m.Caption = caption
	id := "photo" + strconv.Itoa(len(s.files)+1)
	s.files["photos/"+id+".jpg"] = photo
	m.Photo = []models.PhotoSize{{FileID: id + "-small", FileUniqueID: id + "s", Width: 90, Height: 90},
		{FileID: id, FileUniqueID: id, Width: 800, Height: 800, FileSize: len(photo)}}
	return s.push(models.Update{Message: m}), m.ID
}

// Press makes the user press the button with callback data on message msgID
// of chat; it returns the callback query's id.
func (s *Server) Press(chat int64, msgID int, data string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := "cq" + strconv.Itoa(len(s.queries)+1)
	s.queries[id] = &query{chat: chat, msgID: msgID}
	u := User
	var m models.MaybeInaccessibleMessage
	if ms := s.msgs[chat]; msgID >= 1 && msgID <= len(ms) {
		m = models.MaybeInaccessibleMessage{Type: models.MaybeInaccessibleMessageTypeMessage, Message: ms[msgID-1].model()}
	}
	s.push(models.Update{CallbackQuery: &models.CallbackQuery{ID: id, From: u, Message: m, ChatInstance: "ci", Data: data}})
	return id
}

// Answered reports whether callback query id was answered, and its text.
func (s *Server) Answered(id string) (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queries[id]
	if q == nil {
		return false, ""
	}
	return q.answered, q.text
}

// push queues an update (update ids count from 1000).
func (s *Server) push(u models.Update) int64 {
	s.nextUpd++
	u.ID = 1000 + s.nextUpd
	s.updates = append(s.updates, u)
	s.notify()
	s.wake()
	return u.ID
}

func (s *Server) wake() {
	select {
	case s.hookWake <- struct{}{}:
	default:
	}
}

// Pending is how many updates wait for confirmation.
func (s *Server) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.updates)
}

// getUpdates answers the updates from offset on, after dropping those
// before it (confirmed), waiting up to timeout seconds for one.
func (s *Server) getUpdates(w http.ResponseWriter, ctx context.Context, p map[string]string) {
	offset, _ := strconv.ParseInt(p["offset"], 10, 64)
	limit, _ := strconv.Atoi(p["limit"])
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	timeout, _ := strconv.Atoi(p["timeout"])
	deadline := time.Now().Add(time.Duration(timeout) * time.Second)
	for {
		s.mu.Lock()
		if s.webhook != "" {
			s.calls = append(s.calls, Call{Method: "getUpdates", Params: p, At: time.Now(), Code: 409})
			s.notify()
			s.mu.Unlock()
			writeErr(w, &apiError{code: 409, desc: "Conflict: can't use getUpdates method while webhook is active; use deleteWebhook to delete the webhook first"})
			return
		}
		s.updates = slices.DeleteFunc(s.updates, func(u models.Update) bool { return offset > 0 && u.ID < offset })
		var out []models.Update
		for _, u := range s.updates {
			if len(out) < limit {
				out = append(out, u)
			}
		}
		changed := s.changed
		if len(out) > 0 || !time.Now().Before(deadline) {
			s.calls = append(s.calls, Call{Method: "getUpdates", Params: p, At: time.Now(), Code: 200})
			s.notify()
			s.mu.Unlock()
			if out == nil {
				out = []models.Update{}
			}
			writeOK(w, out)
			return
		}
		s.mu.Unlock()
		select {
		case <-changed:
		case <-time.After(time.Until(deadline)):
		case <-ctx.Done():
			return
		}
	}
}

// deliver posts queued updates to the webhook, in order, each until the bot
// answers 2xx (Telegram retries a failed delivery).
func (s *Server) deliver(hook string) {
	for {
		s.mu.Lock()
		if s.webhook != hook {
			s.mu.Unlock()
			return
		}
		var u *models.Update
		if len(s.updates) > 0 {
			u = &s.updates[0]
		}
		secret := s.secret
		var body []byte
		if u != nil {
			body, _ = json.Marshal(u)
		}
		s.mu.Unlock()
		if u == nil {
			select {
			case <-s.hookWake:
				continue
			case <-s.done:
				return
			}
		}
		req, _ := http.NewRequest(http.MethodPost, hook, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if secret != "" {
			req.Header.Set("X-Telegram-Bot-Api-Secret-Token", secret)
		}
		resp, err := s.client.Do(req)
		ok := err == nil && resp.StatusCode/100 == 2
		if resp != nil {
			resp.Body.Close()
		}
		s.mu.Lock()
		if ok && len(s.updates) > 0 {
			s.updates = s.updates[1:]
			s.notify()
		}
		s.mu.Unlock()
		if !ok {
			select {
			case <-time.After(100 * time.Millisecond):
			case <-s.done:
				return
			}
		}
	}
}

// Messages returns chat's visible messages (the user's and the bot's),
// oldest first.
func (s *Server) Messages(chat int64) []Msg {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []Msg
	for _, m := range s.msgs[chat] {
		if !m.Deleted {
			c := *m
			c.Keyboard = slices.Clone(m.Keyboard)
			out = append(out, c)
		}
	}
	return out
}

// BotMessages returns chat's visible messages from the bot.
func (s *Server) BotMessages(chat int64) []Msg {
	return slices.DeleteFunc(s.Messages(chat), func(m Msg) bool { return !m.FromBot })
}

// Calls returns every call received so far.
func (s *Server) Calls() []Call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.calls)
}

// Count is how many calls of method chat received that succeeded (Code 200);
// chat 0 counts every chat.
func (s *Server) Count(chat int64, method string) int {
	n := 0
	for _, c := range s.Calls() {
		if c.Method == method && (chat == 0 || c.Chat == chat) && c.Code == 200 {
			n++
		}
	}
	return n
}

// Wait returns once cond holds (checked after every call and update), or
// ctx's error.
func (s *Server) Wait(ctx context.Context, cond func(*Server) bool) error {
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
