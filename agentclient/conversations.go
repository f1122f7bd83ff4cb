package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"time"
)

// DefaultConversation is the conversation id of an agent's default thread:
// requests to it carry the agent id (in the body of a send or resume, in
// the query of a list or cancel).
const DefaultConversation = "default"

var conversationIDPattern = regexp.MustCompile(`^conv-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// ValidConversationID reports whether id is a conversation id Letta accepts
// in a path: "default" or conv-<uuid4> (lower-case hex).
func ValidConversationID(id string) bool {
	return id == DefaultConversation || conversationIDPattern.MatchString(id)
}

func checkConversationID(op, id string) error {
	if !ValidConversationID(id) {
		return fmt.Errorf("agentclient: %s: conversation id %q: want %q or conv-<uuid4>", op, id, DefaultConversation)
	}
	return nil
}

// Conversation is one message thread of an agent (Letta's Conversation).
// All of an agent's conversations share its memory.
type Conversation struct {
	ID            string
	AgentID       string
	Summary       string
	CreatedAt     time.Time
	LastMessageAt *time.Time
}

type conversationWire struct {
	ID            string     `json:"id"`
	AgentID       string     `json:"agent_id"`
	Summary       *string    `json:"summary"`
	CreatedAt     *time.Time `json:"created_at"`
	LastMessageAt *time.Time `json:"last_message_at"`
}

func (w conversationWire) conversation() *Conversation {
	c := &Conversation{ID: w.ID, AgentID: w.AgentID, LastMessageAt: w.LastMessageAt}
	if w.Summary != nil {
		c.Summary = *w.Summary
	}
	if w.CreatedAt != nil {
		c.CreatedAt = *w.CreatedAt
	}
	return c
}

// CreateConversationRequest is the body of a create (every field optional).
type CreateConversationRequest struct {
	// Summary tags the conversation; ListConversationsOptions.SummarySearch
	// finds it again.
	Summary string `json:"summary,omitempty"`
}

// CreateConversation creates a conversation of an agent
// (POST /v1/conversations/?agent_id=…).
func (c *Client) CreateConversation(ctx context.Context, agentID string, req CreateConversationRequest) (*Conversation, error) {
	if agentID == "" {
		return nil, errors.New("agentclient: CreateConversation: agent id is empty")
	}
	var w conversationWire
	q := url.Values{"agent_id": {agentID}}
	if err := c.doJSON(ctx, "create conversation", http.MethodPost, "/v1/conversations/", q, req, &w); err != nil {
		return nil, err
	}
	if w.ID == "" {
		return nil, fmt.Errorf("letta: create conversation: the answer has no conversation id")
	}
	return w.conversation(), nil
}

// ListConversationsOptions filter and page GET /v1/conversations/. Zero
// values leave the server's defaults (limit 50, newest first).
type ListConversationsOptions struct {
	AgentID string
	Limit   int
	// After is a conversation id cursor.
	After string
	// Order is "asc" or "desc".
	Order string
	// SummarySearch finds conversations whose summary contains the text.
	SummarySearch string
}

// ListConversations lists conversations.
func (c *Client) ListConversations(ctx context.Context, o ListConversationsOptions) ([]*Conversation, error) {
	q := url.Values{}
	if o.AgentID != "" {
		q.Set("agent_id", o.AgentID)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Order != "" {
		q.Set("order", o.Order)
	}
	if o.SummarySearch != "" {
		q.Set("summary_search", o.SummarySearch)
	}
	var ws []conversationWire
	if err := c.doJSON(ctx, "list conversations", http.MethodGet, "/v1/conversations/", q, nil, &ws); err != nil {
		return nil, err
	}
	out := make([]*Conversation, len(ws))
	for i, w := range ws {
		out[i] = w.conversation()
	}
	return out, nil
}

// GetConversation fetches a conversation (conv-… only; a 404 means it does
// not exist).
func (c *Client) GetConversation(ctx context.Context, id string) (*Conversation, error) {
	if id == DefaultConversation || !ValidConversationID(id) {
		return nil, fmt.Errorf("agentclient: GetConversation: conversation id %q: want conv-<uuid4>", id)
	}
	var w conversationWire
	if err := c.doJSON(ctx, "get conversation", http.MethodGet, "/v1/conversations/"+id, nil, nil, &w); err != nil {
		return nil, err
	}
	return w.conversation(), nil
}

// conversationSendBody is ConversationMessageRequest as lettaq sends it.
type conversationSendBody struct {
	Messages     []any  `json:"messages"`
	Streaming    bool   `json:"streaming"`
	StreamTokens bool   `json:"stream_tokens"`
	IncludePings bool   `json:"include_pings"`
	Background   bool   `json:"background"`
	MaxSteps     int    `json:"max_steps,omitempty"`
	AgentID      string `json:"agent_id,omitempty"`
}

func (r SendRequest) conversationBody() conversationSendBody {
	b := conversationSendBody{
		Messages:  r.messages(),
		Streaming: true, StreamTokens: r.StreamTokens, IncludePings: !r.NoPings, Background: r.Background,
		MaxSteps: r.MaxSteps,
	}
	if r.ConversationID == DefaultConversation {
		b.AgentID = r.AgentID
	}
	return b
}

// ConversationResumeRequest re-attaches to a run of a conversation: by
// RunID; else by Otid (the server's otid map of background sends, kept 3 h:
// an unknown otid is a 404, IsNotFound); else the conversation's newest
// active run (400 when there is none).
type ConversationResumeRequest struct {
	ConversationID string
	// AgentID is required for the default conversation.
	AgentID string
	RunID   string
	Otid    string
	// StartingAfter is the last seq_id already seen (0: from the start).
	StartingAfter int64
	// NoPings asks the server not to send keep-alive pings (they are on by
	// default, and the stall clock relies on them).
	NoPings bool
}

type conversationResumeBody struct {
	AgentID       string  `json:"agent_id,omitempty"`
	RunID         string  `json:"run_id,omitempty"`
	Otid          string  `json:"otid,omitempty"`
	StartingAfter int64   `json:"starting_after"`
	IncludePings  bool    `json:"include_pings"`
	PollInterval  float64 `json:"poll_interval"`
	BatchSize     int     `json:"batch_size"`
}

// ResumeConversationStream resumes a background run's stream through
// POST /v1/conversations/{id}/stream, with the same parser, state and clocks
// as SendStream. Letta answers 410 (IsGone) when the run was created more
// than 3 h ago, 404 for an otid it does not know, 400 when the run was not
// background or nothing is active: poll the run then. The stream's first
// ping names the run, so a resume by otid teaches st its run id.
func (c *Client) ResumeConversationStream(ctx context.Context, req ConversationResumeRequest, st *StreamState, opt StreamOptions) error {
	if err := checkConversationID("ConversationResumeRequest.ConversationID", req.ConversationID); err != nil {
		return err
	}
	if req.ConversationID == DefaultConversation && req.AgentID == "" {
		return errors.New("agentclient: ConversationResumeRequest: the default conversation needs AgentID")
	}
	if req.RunID != "" {
		st.SetRunID(req.RunID)
	}
	body := conversationResumeBody{RunID: req.RunID, Otid: req.Otid, StartingAfter: req.StartingAfter,
		IncludePings: !req.NoPings, PollInterval: 0.1, BatchSize: 100}
	if req.ConversationID == DefaultConversation {
		body.AgentID = req.AgentID
	}
	path := "/v1/conversations/" + req.ConversationID + "/stream"
	st.expectSeqAfter(req.StartingAfter, true)
	return c.stream(ctx, "resume conversation stream", path, body, st, &opt)
}

// ListConversationMessages lists a conversation's history
// (GET /v1/conversations/{id}/messages; agentID is required for the default
// conversation). Cursors follow the sort order; an unknown cursor is a 404.
func (c *Client) ListConversationMessages(ctx context.Context, conversationID, agentID string, o ListOptions) ([]Message, error) {
	if err := checkConversationID("ListConversationMessages", conversationID); err != nil {
		return nil, err
	}
	q := o.query()
	if conversationID == DefaultConversation {
		if agentID == "" {
			return nil, errors.New("agentclient: ListConversationMessages: the default conversation needs the agent id")
		}
		q.Set("agent_id", agentID)
	}
	var raw []json.RawMessage
	if err := c.doJSON(ctx, "list conversation messages", http.MethodGet, "/v1/conversations/"+conversationID+"/messages", q, nil, &raw); err != nil {
		return nil, err
	}
	return decodeMessages(raw)
}

// CancelConversation cancels the conversation's active runs
// (POST /v1/conversations/{id}/cancel; agentID is required for the default
// conversation). Letta answers 409 when nothing runs.
func (c *Client) CancelConversation(ctx context.Context, conversationID, agentID string) (map[string]any, error) {
	if err := checkConversationID("CancelConversation", conversationID); err != nil {
		return nil, err
	}
	q := url.Values{}
	if conversationID == DefaultConversation {
		if agentID == "" {
			return nil, errors.New("agentclient: CancelConversation: the default conversation needs the agent id")
		}
		q.Set("agent_id", agentID)
	}
	out := map[string]any{}
	if err := c.doJSON(ctx, "cancel conversation", http.MethodPost, "/v1/conversations/"+conversationID+"/cancel", q, nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}
