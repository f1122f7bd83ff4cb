package webchat

import (
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Integration is the conversation integration of the page's chats: their
// reply streams are <prefix>replies:web:<chat id>.
const Integration = "web"

// Enqueuer makes a chat message a turn (queue.Client).
type Enqueuer interface {
	Enqueue(ctx context.Context, m queue.Message) (queue.EnqueueResult, error)
}

// Stream reads a chat's reply stream (queue.Replies).
type Stream interface {
	Read(ctx context.Context, c record.Conversation, after string, count int64, block time.Duration) ([]record.ReplyEvent, string, error)
}

// Approver answers an approval request (queue.Client).
type Approver interface {
	AnswerApproval(ctx context.Context, r queue.ApprovalReply) (queue.EnqueueResult, error)
}

// Canceller stops a chat's running turn (queue.Client).
type Canceller interface {
	Cancel(ctx context.Context, r queue.CancelRequest) (queue.CancelResult, error)
}

// Agent is an agent the page offers.
type Agent struct {
	Name string `json:"name"`
	ID   string `json:"id"`
}

// Config configures the page's handler.
type Config struct {
	Enqueue   Enqueuer
	Stream    Stream
	Approvals Approver
	Cancel    Canceller
	// Said keeps the text of the user's messages, which the reply stream
	// does not carry (see RedisSaid). Nil: the page shows the user's
	// message only in the tab that sent it, until a reload.
	Said Said
	// Agents are the agents offered, in order.
	Agents []Agent
	// AnyAgent also lets the user type an agent id (agent-<uuid4>).
	AnyAgent bool
	// JournalURL is the address a turn's journal is shown at, with the
	// task id appended (e.g. "/turns/"); "" shows no link.
	JournalURL string
	// Heartbeat is the longest quiet time on an event stream before a
	// comment line is sent, so that proxies keep it open. Default 15s.
	Heartbeat time.Duration
	// Block is the longest a read of the reply stream waits; a handler whose
	// client went away ends within it. Default 5s (at most Heartbeat).
	Block time.Duration
	// Tail, when set, is the id of the chat's last stream entry (""
	// for an empty stream): a resume from an id above it (the stream's tail
	// was lost, reply-events.md "Seq") reads the stream from its start again,
	// and the page drops by seq what it has shown.
	Tail   func(ctx context.Context, c record.Conversation) (string, error)
	Logger *slog.Logger
}

//go:embed static
var static embed.FS

// maxBodyBytes bounds a request body: a message's text and its images in
// base64 (queue.MaxTextBytes, queue.MaxImagesBytes) and room for the rest.
const maxBodyBytes = queue.MaxTextBytes + queue.MaxImagesBytes/3*4 + 64<<10

type handler struct {
	cfg    Config
	agents map[string]string // name and id → id
	log    *slog.Logger
}

// New returns the page's handler. It serves, relative to where it is mounted
// (mount it with http.StripPrefix):
//
//	GET  /            the page (index.html, app.js, style.css)
//	GET  config       the agents offered, whether any agent id is taken, the journal address
//	POST send         {chat, agent, message_id, text, images}: a message (202 with the enqueue result)
//	GET  events?chat= the chat's reply events as Server-Sent Events, from Last-Event-ID
//	POST approve      {chat, request, approve}: answers an approval request
//	POST stop         {chat, agent}: stops the chat's running turn
func New(cfg Config) http.Handler {
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = 15 * time.Second
	}
	if cfg.Block <= 0 {
		cfg.Block = 5 * time.Second
	}
	cfg.Block = min(cfg.Block, cfg.Heartbeat)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{cfg: cfg, agents: map[string]string{}, log: cfg.Logger}
	for _, a := range cfg.Agents {
		h.agents[a.Name], h.agents[a.ID] = a.ID, a.ID
	}
	sub, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	mux.Handle("GET /", http.FileServerFS(sub))
	mux.HandleFunc("GET /config", h.config)
	mux.HandleFunc("POST /send", h.send)
	mux.HandleFunc("GET /events", h.events)
	mux.HandleFunc("POST /approve", h.approve)
	mux.HandleFunc("POST /stop", h.stop)
	return mux
}

func (h *handler) config(w http.ResponseWriter, _ *http.Request) {
	agents := h.cfg.Agents
	if agents == nil {
		agents = []Agent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"agents": agents, "any_agent": h.cfg.AnyAgent, "journal_url": h.cfg.JournalURL})
}

// agentID is the id of the agent named or given by s, or an error for the
// user.
func (h *handler) agentID(s string) (string, error) {
	if id, ok := h.agents[s]; ok {
		return id, nil
	}
	if h.cfg.AnyAgent && agentclient.IsAgentID(s) {
		return s, nil
	}
	if s == "" {
		return "", errors.New("pick an agent")
	}
	return "", fmt.Errorf("agent %q is not one this page offers", trim(s, 80))
}

// chat is the conversation of a chat id from the page.
func chat(id string) (record.Conversation, error) {
	c := record.Conversation{Integration: Integration, ChatID: id}
	if id == "" {
		return c, errors.New("chat: missing")
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, nil
}

type sendBody struct {
	Chat      string        `json:"chat"`
	Agent     string        `json:"agent"`
	MessageID string        `json:"message_id"`
	Text      string        `json:"text"`
	Images    []queue.Image `json:"images"`
}

func (h *handler) send(w http.ResponseWriter, r *http.Request) {
	var b sendBody
	if !readJSON(w, r, &b) {
		return
	}
	c, err := chat(b.Chat)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "chat", err.Error())
		return
	}
	agent, err := h.agentID(b.Agent)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "agent", err.Error())
		return
	}
	if b.MessageID == "" {
		writeErr(w, http.StatusBadRequest, "message_id", "missing: the page mints one per message, so that a message sent twice is one turn")
		return
	}
	m := queue.Message{AgentID: agent, Text: b.Text, Images: b.Images, SenderID: "web", Conversation: c, MessageID: b.MessageID}
	if err := m.Validate(); err != nil {
		writeQueueErr(w, err)
		return
	}
	// The text first: the accepted event that the enqueue writes names the
	// message, and a page reading the stream then finds what it said.
	if h.cfg.Said != nil {
		if err := h.cfg.Said.Put(r.Context(), c, b.MessageID, Said1{Text: b.Text, Images: len(b.Images)}); err != nil {
			h.log.Warn("webchat: could not keep the message's text", "chat", c.String(), "err", err)
		}
	}
	res, err := h.cfg.Enqueue.Enqueue(r.Context(), m)
	if err != nil {
		writeQueueErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

type approveBody struct {
	Chat    string `json:"chat"`
	Request string `json:"request"`
	Approve bool   `json:"approve"`
}

func (h *handler) approve(w http.ResponseWriter, r *http.Request) {
	var b approveBody
	if !readJSON(w, r, &b) {
		return
	}
	if _, err := chat(b.Chat); err != nil {
		writeErr(w, http.StatusBadRequest, "chat", err.Error())
		return
	}
	if b.Request == "" {
		writeErr(w, http.StatusBadRequest, "request", "missing: the request's task id")
		return
	}
	// One message id per request: a second press (or a press in another
	// tab) is the same answer, not a second one.
	res, err := h.cfg.Approvals.AnswerApproval(r.Context(), queue.ApprovalReply{
		Request: b.Request, Approve: b.Approve, SenderID: "web", MessageID: "answer:" + b.Request})
	if errors.Is(err, queue.ErrNoApproval) || errors.Is(err, queue.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "request", "no open approval request "+trim(b.Request, 80)+": it was answered, expired, or never asked")
		return
	}
	if err != nil {
		writeQueueErr(w, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

type stopBody struct {
	Chat  string `json:"chat"`
	Agent string `json:"agent"`
}

func (h *handler) stop(w http.ResponseWriter, r *http.Request) {
	var b stopBody
	if !readJSON(w, r, &b) {
		return
	}
	c, err := chat(b.Chat)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "chat", err.Error())
		return
	}
	agent, err := h.agentID(b.Agent)
	if err != nil {
		writeErr(w, http.StatusBadRequest, "agent", err.Error())
		return
	}
	// The head of the chat's line: the turn that runs (or runs next).
	res, err := h.cfg.Cancel.Cancel(r.Context(), queue.CancelRequest{Chat: &c, AgentID: agent, By: "web", Reason: "stop button"})
	if errors.Is(err, queue.ErrNotFound) {
		writeErr(w, http.StatusNotFound, "", "nothing is running in this chat")
		return
	}
	if err != nil {
		writeQueueErr(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// readJSON decodes a POST's JSON body into v, or answers the error (415,
// 413, 400) and returns false. Only application/json is taken: a browser
// sends no such body across sites without asking first.
func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeErr(w, http.StatusUnsupportedMediaType, "", "Content-Type must be application/json")
		return false
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBodyBytes))
	if err := dec.Decode(v); err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeErr(w, http.StatusRequestEntityTooLarge, "", fmt.Sprintf("body larger than %d bytes", maxBodyBytes))
			return false
		}
		writeErr(w, http.StatusBadRequest, "", "body is not the JSON expected: "+err.Error())
		return false
	}
	return true
}

// writeQueueErr answers an error of the queue: bad input 400 (naming the
// field), a message id sent before with another text 409, else 500.
func writeQueueErr(w http.ResponseWriter, err error) {
	if ve, ok := queue.IsValidationError(err); ok {
		writeErr(w, http.StatusBadRequest, ve.Field, ve.Error())
		return
	}
	var conflict *queue.MessageIDConflictError
	if errors.As(err, &conflict) {
		writeErr(w, http.StatusConflict, "message_id", conflict.Error())
		return
	}
	writeErr(w, http.StatusInternalServerError, "", "could not reach the queue, try again: "+err.Error())
}

func writeErr(w http.ResponseWriter, status int, field, msg string) {
	body := map[string]string{"error": msg}
	if field != "" {
		body["field"] = field
	}
	writeJSON(w, status, body)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func trim(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
