// Package telegramfake is a Telegram Bot API server in memory, for the
// Telegram adapter's tests and for trying the relay without a bot token. It
// answers the methods the adapter uses as Telegram does (bots/api): message
// texts of 1–4096 UTF-16 code units after entity parsing, "can't parse
// entities" for bad HTML, "message is not modified" for an edit that changes
// nothing, callback_data of 1–64 bytes, 429 with parameters.retry_after over
// the rate limits, getUpdates with offsets (a confirmed update is dropped),
// setWebhook with its secret token sent on every delivery; and it counts
// every call per chat, so that a test can assert what a user would see.
//
// A test plays the user with SendText, SendPhoto and Press, and reads the
// chat with Messages, Calls and Count; a person does the same over HTTP
// (UserPath).
package telegramfake

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot/models"
)

// Token is the bot token the fake accepts unless New is given another.
const Token = "123456:fake-token"

// BotUsername is the fake bot's @username.
const BotUsername = "lettaq_fake_bot"

// BotID is the fake bot's user id.
const BotID = 123456

// Rules are the fake's rate limits; the zero value enforces none but the
// global one.
type Rules struct {
	// Global is the most messages (sends and edits) a second over all chats
	// (Telegram: about 30). Zero: 30; negative: none.
	Global int
	// PerChat is the most messages a chat takes in PerChatWindow (Telegram:
	// about 1 a second in a private chat, 20 a minute in a group). Zero: none.
	PerChat       int
	PerChatWindow time.Duration
	// RetryAfter is the retry_after (seconds) a 429 names. Zero: 1.
	RetryAfter int
}

// Msg is one message as the fake holds it.
type Msg struct {
	Chat      int64
	ID        int
	Thread    int
	Text      string // as shown (entities parsed)
	ParseMode string
	Keyboard  [][]models.InlineKeyboardButton
	Deleted   bool
	Edits     int
	FromBot   bool
}

// Call is one Bot API call the fake received.
type Call struct {
	Method string
	Chat   int64
	Params map[string]string
	At     time.Time
	// Code is the HTTP status answered: 200, 400, 429…; Desc Telegram's
	// description of an error.
	Code int
	Desc string
}

// Server is the fake. Create it with New.
type Server struct {
	token string
	rules Rules

	mu       sync.Mutex
	msgs     map[int64][]*Msg // by chat; index = message_id-1
	calls    []Call
	updates  []models.Update
	nextUpd  int64
	queries  map[string]*query
	files    map[string][]byte
	webhook  string
	secret   string
	limited  map[string]int    // method → one 429 with this retry_after
	refuse   map[string]string // method → one 400 with this description
	sentAt   []time.Time
	chatAt   map[int64][]time.Time
	changed  chan struct{}
	hookWake chan struct{}
	client   *http.Client
	done     chan struct{}
	once     sync.Once
}

type query struct {
	chat     int64
	msgID    int
	answered bool
	text     string
}

// New returns a fake that accepts token (empty: Token).
func New(token string, r Rules) *Server {
	if token == "" {
		token = Token
	}
	if r.Global == 0 {
		r.Global = 30
	}
	if r.RetryAfter == 0 {
		r.RetryAfter = 1
	}
	if r.PerChatWindow == 0 {
		r.PerChatWindow = time.Second
	}
	return &Server{token: token, rules: r, msgs: map[int64][]*Msg{}, queries: map[string]*query{},
		files: map[string][]byte{}, limited: map[string]int{}, refuse: map[string]string{},
		chatAt: map[int64][]time.Time{}, changed: make(chan struct{}), hookWake: make(chan struct{}, 1),
		client: &http.Client{Timeout: 10 * time.Second}, done: make(chan struct{})}
}

// Close stops webhook deliveries.
func (s *Server) Close() { s.once.Do(func() { close(s.done) }) }

// RateLimitNext makes the next call of method answer 429 with retry_after
// seconds.
func (s *Server) RateLimitNext(method string, retryAfter int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limited[method] = retryAfter
}

// RefuseNext makes the next call of method answer 400 with description
// ("Forbidden: …" answers 403).
func (s *Server) RefuseNext(method, description string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.refuse[method] = description
}

// apiError is a Bot API error answer.
type apiError struct {
	code       int
	desc       string
	retryAfter int
}

func badRequest(format string, a ...any) *apiError {
	return &apiError{code: 400, desc: "Bad Request: " + fmt.Sprintf(format, a...)}
}

// Handler serves the Bot API at /bot<token>/<method>, files at
// /file/bot<token>/<path>, and the user's side at UserPath.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if rest, ok := strings.CutPrefix(r.URL.Path, "/file/bot"+s.token+"/"); ok {
			s.mu.Lock()
			b, found := s.files[rest]
			s.mu.Unlock()
			if !found {
				http.NotFound(w, r)
				return
			}
			_, _ = w.Write(b)
			return
		}
		if what, ok := strings.CutPrefix(r.URL.Path, UserPath); ok {
			s.serveUser(w, r, what)
			return
		}
		rest, ok := strings.CutPrefix(r.URL.Path, "/bot")
		tok, method, ok2 := strings.Cut(rest, "/")
		if !ok || !ok2 {
			writeErr(w, &apiError{code: 404, desc: "Not Found"})
			return
		}
		if tok != s.token {
			writeErr(w, &apiError{code: 401, desc: "Unauthorized"})
			return
		}
		p, err := params(r)
		if err != nil {
			writeErr(w, badRequest("%v", err))
			return
		}
		if method == "getUpdates" {
			s.getUpdates(w, r.Context(), p)
			return
		}
		res, aerr := s.call(method, p)
		if aerr != nil {
			writeErr(w, aerr)
			return
		}
		writeOK(w, res)
	})
}

// params reads a call's parameters, sent as multipart or URL-encoded form
// (go-telegram/bot sends multipart), JSON or a query string.
func params(r *http.Request) (map[string]string, error) {
	out := map[string]string{}
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var m map[string]json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&m); err != nil && err != io.EOF {
			return nil, fmt.Errorf("bad JSON: %v", err)
		}
		for k, v := range m {
			var s string
			if json.Unmarshal(v, &s) == nil {
				out[k] = s
			} else {
				out[k] = string(v)
			}
		}
	case "multipart/form-data":
		// A method without parameters comes as a form without parts
		// (go-telegram/bot's getMe), which Telegram takes.
		if err := r.ParseMultipartForm(1 << 20); err != nil && !errors.Is(err, io.EOF) && !strings.Contains(err.Error(), "EOF") {
			return nil, err
		}
		if r.MultipartForm == nil {
			return out, nil
		}
		for k, v := range r.MultipartForm.Value {
			out[k] = v[0]
		}
	default:
		if err := r.ParseForm(); err != nil {
			return nil, err
		}
		for k, v := range r.Form {
			out[k] = v[0]
		}
	}
	return out, nil
}

func writeOK(w http.ResponseWriter, res any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": true, "result": res})
}

func writeErr(w http.ResponseWriter, e *apiError) {
	body := map[string]any{"ok": false, "error_code": e.code, "description": e.desc}
	if e.retryAfter > 0 {
		body["parameters"] = map[string]int{"retry_after": e.retryAfter}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(e.code)
	_ = json.NewEncoder(w).Encode(body)
}

// call runs one method and records it.
func (s *Server) call(method string, p map[string]string) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	chat, _ := strconv.ParseInt(p["chat_id"], 10, 64)
	c := Call{Method: method, Chat: chat, Params: p, At: time.Now(), Code: 200}
	res, err := s.run(method, chat, p, c.At)
	if err != nil {
		c.Code, c.Desc = err.code, err.desc
	}
	s.calls = append(s.calls, c)
	s.notify()
	return res, err
}

func (s *Server) notify() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *Server) run(method string, chat int64, p map[string]string, now time.Time) (any, *apiError) {
	if ra, ok := s.limited[method]; ok {
		delete(s.limited, method)
		return nil, tooMany(ra)
	}
	if d, ok := s.refuse[method]; ok {
		delete(s.refuse, method)
		if strings.HasPrefix(d, "Forbidden") {
			return nil, &apiError{code: 403, desc: d}
		}
		return nil, &apiError{code: 400, desc: d}
	}
	switch method {
	case "getMe":
		return models.User{ID: BotID, IsBot: true, FirstName: "lettaq", Username: BotUsername}, nil
	case "sendMessage":
		return s.sendMessage(chat, p, now)
	case "editMessageText":
		return s.editMessageText(chat, p, now)
	case "editMessageReplyMarkup":
		m, err := s.msg(chat, p, "edit")
		if err != nil {
			return nil, err
		}
		kb, err := keyboard(p["reply_markup"])
		if err != nil {
			return nil, err
		}
		if slices.EqualFunc(kb, m.Keyboard, slices.Equal) {
			return nil, badRequest("message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
		}
		m.Keyboard = kb
		return m.model(), nil
	case "deleteMessage":
		m, err := s.msg(chat, p, "delete")
		if err != nil {
			return nil, err
		}
		m.Deleted = true
		return true, nil
	case "sendChatAction":
		if _, err := s.chatID(p); err != nil {
			return nil, err
		}
		switch p["action"] {
		case "typing", "upload_photo", "record_video", "upload_video", "record_voice", "upload_voice",
			"upload_document", "choose_sticker", "find_location", "record_video_note", "upload_video_note":
		default:
			return nil, badRequest("wrong parameter action in request")
		}
		return true, nil
	case "answerCallbackQuery":
		q := s.queries[p["callback_query_id"]]
		if q == nil || q.answered {
			return nil, badRequest("query is too old and response timeout expired or query ID is invalid")
		}
		q.answered, q.text = true, p["text"]
		return true, nil
	case "setWebhook":
		u := p["url"]
		if u != "" {
			if pu, err := url.Parse(u); err != nil || (pu.Scheme != "https" && pu.Scheme != "http") {
				return nil, badRequest("bad webhook: An HTTPS URL must be provided for webhook")
			}
		}
		if sec := p["secret_token"]; len(sec) > 256 || strings.Trim(sec, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != "" {
			return nil, badRequest("bad webhook: secret token contains unallowed characters")
		}
		s.webhook, s.secret = u, p["secret_token"]
		if u != "" {
			go s.deliver(u)
		}
		s.wake()
		return true, nil
	case "deleteWebhook":
		s.webhook, s.secret = "", ""
		return true, nil
	case "getFile":
		if _, ok := s.files["photos/"+p["file_id"]+".jpg"]; !ok {
			return nil, badRequest("invalid file_id")
		}
		path := "photos/" + p["file_id"] + ".jpg"
		return models.File{FileID: p["file_id"], FileUniqueID: p["file_id"], FileSize: int64(len(s.files[path])), FilePath: path}, nil
	}
	return nil, &apiError{code: 404, desc: "Not Found"}
}

func tooMany(ra int) *apiError {
	return &apiError{code: 429, desc: fmt.Sprintf("Too Many Requests: retry after %d", ra), retryAfter: ra}
}

func (s *Server) chatID(p map[string]string) (int64, *apiError) {
	id, err := strconv.ParseInt(p["chat_id"], 10, 64)
	if p["chat_id"] == "" {
		return 0, badRequest("chat_id is empty")
	}
	if err != nil {
		return 0, badRequest("chat not found")
	}
	return id, nil
}

// pace counts a message against the rate limits, or answers 429.
func (s *Server) pace(chat int64, now time.Time) *apiError {
	keep := func(ts []time.Time, win time.Duration) []time.Time {
		i := 0
		for i < len(ts) && now.Sub(ts[i]) >= win {
			i++
		}
		return ts[i:]
	}
	s.sentAt = keep(s.sentAt, time.Second)
	if s.rules.Global > 0 && len(s.sentAt) >= s.rules.Global {
		return tooMany(s.rules.RetryAfter)
	}
	if s.rules.PerChat > 0 {
		s.chatAt[chat] = keep(s.chatAt[chat], s.rules.PerChatWindow)
		if len(s.chatAt[chat]) >= s.rules.PerChat {
			return tooMany(s.rules.RetryAfter)
		}
		s.chatAt[chat] = append(s.chatAt[chat], now)
	}
	s.sentAt = append(s.sentAt, now)
	return nil
}

// text checks and parses a message text as Telegram does.
func text(p map[string]string) (string, *apiError) {
	t := p["text"]
	switch strings.ToLower(p["parse_mode"]) {
	case "":
	case "html":
		var err error
		if t, err = parseHTML(t); err != nil {
			return "", badRequest("%v", err)
		}
	default:
		return "", badRequest("unsupported parse_mode")
	}
	// Telegram trims the text's ends; what is left must not be empty.
	t = strings.TrimSpace(t)
	if t == "" {
		return "", badRequest("message text is empty")
	}
	if utf16Len(t) > 4096 {
		return "", badRequest("message is too long")
	}
	return t, nil
}

// keyboard reads an inline keyboard; callback_data must be 1–64 bytes.
func keyboard(raw string) ([][]models.InlineKeyboardButton, *apiError) {
	if raw == "" {
		return nil, nil
	}
	var kb models.InlineKeyboardMarkup
	if err := json.Unmarshal([]byte(raw), &kb); err != nil {
		return nil, badRequest("can't parse reply keyboard markup JSON object")
	}
	for _, row := range kb.InlineKeyboard {
		for _, b := range row {
			if b.CallbackData != "" && len(b.CallbackData) > 64 || b.CallbackData == "" && b.URL == "" {
				return nil, badRequest("BUTTON_DATA_INVALID")
			}
		}
	}
	if len(kb.InlineKeyboard) == 0 {
		return nil, nil
	}
	return kb.InlineKeyboard, nil
}

func (s *Server) sendMessage(chat int64, p map[string]string, now time.Time) (any, *apiError) {
	if _, err := s.chatID(p); err != nil {
		return nil, err
	}
	t, err := text(p)
	if err != nil {
		return nil, err
	}
	kb, err := keyboard(p["reply_markup"])
	if err != nil {
		return nil, err
	}
	if err := s.pace(chat, now); err != nil {
		return nil, err
	}
	thread, _ := strconv.Atoi(p["message_thread_id"])
	m := &Msg{Chat: chat, ID: len(s.msgs[chat]) + 1, Thread: thread, Text: t, ParseMode: p["parse_mode"], Keyboard: kb, FromBot: true}
	s.msgs[chat] = append(s.msgs[chat], m)
	return m.model(), nil
}

// msg finds the message a call names (verb: "edit" or "delete", as
// Telegram's "message to edit not found").
func (s *Server) msg(chat int64, p map[string]string, verb string) (*Msg, *apiError) {
	if _, err := s.chatID(p); err != nil {
		return nil, err
	}
	id, _ := strconv.Atoi(p["message_id"])
	ms := s.msgs[chat]
	if id < 1 || id > len(ms) || ms[id-1].Deleted {
		return nil, badRequest("message to %s not found", verb)
	}
	if verb == "edit" && !ms[id-1].FromBot {
		return nil, badRequest("message can't be edited")
	}
	return ms[id-1], nil
}

func (s *Server) editMessageText(chat int64, p map[string]string, now time.Time) (any, *apiError) {
	m, err := s.msg(chat, p, "edit")
	if err != nil {
		return nil, err
	}
	t, err := text(p)
	if err != nil {
		return nil, err
	}
	// An edit without reply_markup takes the inline keyboard away.
	kb, err := keyboard(p["reply_markup"])
	if err != nil {
		return nil, err
	}
	if t == m.Text && slices.EqualFunc(kb, m.Keyboard, slices.Equal) {
		return nil, badRequest("message is not modified: specified new message content and reply markup are exactly the same as a current content and reply markup of the message")
	}
	if err := s.pace(chat, now); err != nil {
		return nil, err
	}
	m.Text, m.Keyboard, m.ParseMode = t, kb, p["parse_mode"]
	m.Edits++
	return m.model(), nil
}

func (m *Msg) model() *models.Message {
	out := &models.Message{ID: m.ID, MessageThreadID: m.Thread, Date: int(time.Now().Unix()), Chat: models.Chat{ID: m.Chat, Type: chatType(m.Chat)}, Text: m.Text}
	if m.FromBot {
		out.From = &models.User{ID: BotID, IsBot: true, FirstName: "lettaq", Username: BotUsername}
	}
	if m.Keyboard != nil {
		out.ReplyMarkup = &models.InlineKeyboardMarkup{InlineKeyboard: m.Keyboard}
	}
	return out
}

func chatType(chat int64) models.ChatType {
	if chat < 0 {
		return models.ChatTypeSupergroup
	}
	return models.ChatTypePrivate
}
