package agentclient

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// Message types as Letta names them in `message_type`.
const (
	TypeSystem            = "system_message"
	TypeUser              = "user_message"
	TypeReasoning         = "reasoning_message"
	TypeHiddenReasoning   = "hidden_reasoning_message"
	TypeAssistant         = "assistant_message"
	TypeToolCall          = "tool_call_message"
	TypeToolReturn        = "tool_return_message"
	TypeApprovalRequest   = "approval_request_message"
	TypeApprovalResponse  = "approval_response_message"
	TypeError             = "error_message"
	TypeStopReason        = "stop_reason"
	TypeUsage             = "usage_statistics"
	TypePing              = "ping"
	typeInternalServerErr = "internal_server_error"
)

// Message is one decoded Letta message (an element of LettaMessageUnion or
// LettaStreamingResponse). Switch on the concrete type; messages of a type
// this package does not know are *UnknownMessage, never an error.
type Message interface {
	// Base returns the fields every message carries.
	Base() *Common
}

// Common holds the fields shared by Letta's message objects. Nulls decode
// to zero values; SeqID is nil when the wire had null (foreground streams).
type Common struct {
	ID          string `json:"id"`
	Date        string `json:"date"`
	Name        string `json:"name"`
	MessageType string `json:"message_type"`
	Otid        string `json:"otid"`
	SenderID    string `json:"sender_id"`
	StepID      string `json:"step_id"`
	IsErr       bool   `json:"is_err"`
	SeqID       *int64 `json:"seq_id"`
	RunID       string `json:"run_id"`
}

// Base implements Message.
func (c *Common) Base() *Common { return c }

// Content is message content that Letta sends either as a plain string or as
// a list of parts ({"type":"text","text":…}, images, …). Text joins the text
// parts; Parts keeps the list form when the wire used it.
type Content struct {
	Text  string
	Parts []ContentPart
}

// ContentPart is one element of a content list.
type ContentPart struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// UnmarshalJSON accepts a string, a list of parts, or null.
func (c *Content) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*c = Content{}
		return nil
	case b[0] == '"':
		c.Parts = nil
		return json.Unmarshal(b, &c.Text)
	case b[0] == '[':
		var parts []ContentPart
		if err := json.Unmarshal(b, &parts); err != nil {
			return err
		}
		var sb strings.Builder
		for _, p := range parts {
			if p.Type == "text" || p.Type == "" {
				sb.WriteString(p.Text)
			}
		}
		c.Parts, c.Text = parts, sb.String()
		return nil
	default:
		return fmt.Errorf("content: want string or list, got %.20s", b)
	}
}

// MarshalJSON writes the list form when the content came as a list.
func (c Content) MarshalJSON() ([]byte, error) {
	if c.Parts != nil {
		return json.Marshal(c.Parts)
	}
	return json.Marshal(c.Text)
}

// ToolCall is a tool call or, in token mode, a delta of one: keys the server
// dropped (null) are empty strings here.
type ToolCall struct {
	Name       string `json:"name,omitempty"`
	Arguments  string `json:"arguments,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

// ToolCalls decodes `tool_calls`, which Letta sends as a list, a single delta
// object, or null.
type ToolCalls []ToolCall

// UnmarshalJSON accepts a list, one object, or null.
func (t *ToolCalls) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case len(b) == 0 || string(b) == "null":
		*t = nil
		return nil
	case b[0] == '{':
		var one ToolCall
		if err := json.Unmarshal(b, &one); err != nil {
			return err
		}
		*t = ToolCalls{one}
		return nil
	default:
		var list []ToolCall
		if err := json.Unmarshal(b, &list); err != nil {
			return err
		}
		*t = list
		return nil
	}
}

// ToolReturnItem is one element of `tool_returns`.
type ToolReturnItem struct {
	ToolReturn Content  `json:"tool_return"`
	Status     string   `json:"status"`
	ToolCallID string   `json:"tool_call_id"`
	Stdout     []string `json:"stdout"`
	Stderr     []string `json:"stderr"`
}

// ReasoningMessage is the agent's visible reasoning.
type ReasoningMessage struct {
	Common
	Reasoning string
	Source    string
	Signature string
}

// HiddenReasoningMessage is reasoning the provider redacted or the API omitted.
type HiddenReasoningMessage struct {
	Common
	State           string
	HiddenReasoning string
}

// AssistantMessage is text the agent sends to the user.
type AssistantMessage struct {
	Common
	Content Content
}

// UserMessage is a user's message as stored in history (lists only).
type UserMessage struct {
	Common
	Content Content
}

// SystemMessage appears in history lists only.
type SystemMessage struct {
	Common
	Content Content
}

// ToolCallMessage asks for a tool to run. ToolCall is the deprecated single
// field, ToolCalls the list; both may be deltas in token mode.
type ToolCallMessage struct {
	Common
	ToolCall  ToolCall
	ToolCalls ToolCalls
}

// Calls returns the tool calls carried, preferring the list form.
func (m *ToolCallMessage) Calls() []ToolCall { return callsOf(m.ToolCall, m.ToolCalls) }

// ApprovalRequestMessage asks a human to approve a tool call; the run then
// stops with stop reason requires_approval.
type ApprovalRequestMessage struct {
	Common
	ToolCall  ToolCall
	ToolCalls ToolCalls
}

// Calls returns the pending tool calls, preferring the list form.
func (m *ApprovalRequestMessage) Calls() []ToolCall { return callsOf(m.ToolCall, m.ToolCalls) }

func callsOf(one ToolCall, list ToolCalls) []ToolCall {
	if len(list) > 0 {
		return list
	}
	if one != (ToolCall{}) {
		return []ToolCall{one}
	}
	return nil
}

// ApprovalResponseMessage is a human's answer to an approval request.
type ApprovalResponseMessage struct {
	Common
	Raw json.RawMessage
}

// ToolReturnMessage is the result of a tool run.
type ToolReturnMessage struct {
	Common
	ToolReturn  string
	Status      string // success | error
	ToolCallID  string
	Stdout      []string
	Stderr      []string
	ToolReturns []ToolReturnItem
}

// ErrorMessage is an in-band error. It also represents the bare
// {"error":…,"code":…} body Letta sends after an unhandled exception: then
// MessageType is empty, ErrorType holds the code and Message the error text.
type ErrorMessage struct {
	Common
	ErrorType string
	Message   string
	Detail    string
}

// StopReason ends the messages of a run.
type StopReason struct {
	Common
	StopReason string
}

// Usage is the usage_statistics event.
type Usage struct {
	Common
	CompletionTokens  int64    `json:"completion_tokens"`
	PromptTokens      int64    `json:"prompt_tokens"`
	TotalTokens       int64    `json:"total_tokens"`
	StepCount         int64    `json:"step_count"`
	RunIDs            []string `json:"run_ids,omitempty"`
	CachedInputTokens int64    `json:"cached_input_tokens,omitempty"`
	CacheWriteTokens  int64    `json:"cache_write_tokens,omitempty"`
	ReasoningTokens   int64    `json:"reasoning_tokens,omitempty"`
	ContextTokens     int64    `json:"context_tokens,omitempty"`
}

// Ping is a keep-alive. It proves the connection is alive; it is not content.
type Ping struct{ Common }

// UnknownMessage is a message type this package does not know (the server
// grows new ones). It is passed on, never an error.
type UnknownMessage struct {
	Common
	Raw json.RawMessage
}

// wireMessage is the union of every field, decoded in one pass.
type wireMessage struct {
	Common
	// reasoning
	Reasoning string `json:"reasoning"`
	Source    string `json:"source"`
	Signature string `json:"signature"`
	// hidden reasoning
	State           string `json:"state"`
	HiddenReasoning string `json:"hidden_reasoning"`
	// assistant, user, system
	Content Content `json:"content"`
	// tool call, approval request
	ToolCall  *ToolCall `json:"tool_call"`
	ToolCalls ToolCalls `json:"tool_calls"`
	// tool return
	ToolReturn  flexText         `json:"tool_return"`
	Status      string           `json:"status"`
	ToolCallID  string           `json:"tool_call_id"`
	Stdout      []string         `json:"stdout"`
	Stderr      []string         `json:"stderr"`
	ToolReturns []ToolReturnItem `json:"tool_returns"`
	// error_message, and the bare exception body
	ErrorType string          `json:"error_type"`
	Message   string          `json:"message"`
	Detail    flexText        `json:"detail"`
	Error     json.RawMessage `json:"error"`
	Code      string          `json:"code"`
	// stop_reason
	StopReason string `json:"stop_reason"`
	// usage_statistics
	CompletionTokens  int64    `json:"completion_tokens"`
	PromptTokens      int64    `json:"prompt_tokens"`
	TotalTokens       int64    `json:"total_tokens"`
	StepCount         int64    `json:"step_count"`
	RunIDs            []string `json:"run_ids"`
	CachedInputTokens *int64   `json:"cached_input_tokens"`
	CacheWriteTokens  *int64   `json:"cache_write_tokens"`
	ReasoningTokens   *int64   `json:"reasoning_tokens"`
	ContextTokens     *int64   `json:"context_tokens"`

	tc ToolCall // fastDecode's ToolCall target (ToolCall points here)
}

// DecodeMessage decodes one JSON message object. Unknown message types come
// back as *UnknownMessage; only malformed JSON is an error.
//
// The returned Message is the caller's: it shares nothing with the
// decoder's pooled scratch (its strings are either new or interned, and
// strings are immutable), so it may be kept for as long as wanted.
func DecodeMessage(data []byte) (Message, error) {
	s := getScan()
	defer s.release() // after typed: release zeroes s.w
	if !s.decode(data, &s.w) {
		return decodeStd(data)
	}
	return s.w.typed(data), nil
}

// decodeStreamMessage is DecodeMessage for a stream's read path, where
// pings come every few seconds for as long as the agent thinks: a ping is
// decoded without its id and date (a keep-alive's own, which name nothing),
// and one that repeats last (the stream's previous ping: the same run id
// and seq id) is handed on as last itself, so that a ping allocates
// nothing. Any other message is decoded as DecodeMessage decodes it.
func decodeStreamMessage(data []byte, last *Ping) (Message, error) {
	s := getScan()
	defer s.release() // after typed: release zeroes s.w
	s.lazyIDs = true
	if !s.decode(data, &s.w) {
		m, err := decodeStd(data)
		if p, ok := m.(*Ping); ok {
			return streamPing(&p.Common, last), err
		}
		return m, err
	}
	if s.w.MessageType == TypePing {
		s.idRaw, s.dateRaw = nil, nil
		if s.runRaw != nil {
			if last != nil && string(s.runRaw) == last.RunID {
				s.w.RunID = last.RunID
			} else {
				s.w.RunID = string(s.runRaw)
			}
			s.runRaw = nil
		}
		return streamPing(&s.w.Common, last), nil
	}
	s.strings(&s.w)
	return s.w.typed(data), nil
}

// streamPing is the ping c on a stream whose previous ping was last (nil
// before the first): last again when c repeats it, else a new Ping with
// c's fields but its id and date.
func streamPing(c *Common, last *Ping) *Ping {
	if last != nil && last.RunID == c.RunID && last.MessageType == c.MessageType && last.Name == c.Name &&
		last.Otid == c.Otid && last.SenderID == c.SenderID && last.StepID == c.StepID && last.IsErr == c.IsErr &&
		(last.SeqID == nil) == (c.SeqID == nil) && (c.SeqID == nil || *last.SeqID == *c.SeqID) {
		return last
	}
	p := &Ping{Common: *c}
	p.ID, p.Date = "", ""
	if c.SeqID != nil {
		seq := *c.SeqID
		p.SeqID = &seq
	}
	return p
}

// decodeStd is the reference decoder (encoding/json).
func decodeStd(data []byte) (Message, error) {
	var w wireMessage
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("agentclient: decode message: %w", err)
	}
	return w.typed(data), nil
}

func rawString(b json.RawMessage) string {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || string(b) == "null" {
		return ""
	}
	if b[0] == '"' {
		var s string
		if json.Unmarshal(b, &s) == nil {
			return s
		}
	}
	if b[0] == '[' {
		var c Content
		if c.UnmarshalJSON(b) == nil {
			return c.Text
		}
	}
	return string(b)
}

// flexText is a field Letta sends as a string, a list of text parts, or
// (rarely) another JSON value, kept as its text.
type flexText string

// UnmarshalJSON decodes like rawString.
func (f *flexText) UnmarshalJSON(b []byte) error {
	*f = flexText(rawString(b))
	return nil
}

func deref(p *int64) int64 {
	if p == nil {
		return 0
	}
	return *p
}

func (w *wireMessage) typed(data []byte) Message {
	c := w.Common
	switch w.MessageType {
	case TypeReasoning:
		return &ReasoningMessage{Common: c, Reasoning: w.Reasoning, Source: w.Source, Signature: w.Signature}
	case TypeHiddenReasoning:
		return &HiddenReasoningMessage{Common: c, State: w.State, HiddenReasoning: w.HiddenReasoning}
	case TypeAssistant:
		return &AssistantMessage{Common: c, Content: w.Content}
	case TypeUser:
		return &UserMessage{Common: c, Content: w.Content}
	case TypeSystem:
		return &SystemMessage{Common: c, Content: w.Content}
	case TypeToolCall, TypeApprovalRequest:
		var one ToolCall
		if w.ToolCall != nil {
			one = *w.ToolCall
		}
		if w.MessageType == TypeToolCall {
			return &ToolCallMessage{Common: c, ToolCall: one, ToolCalls: w.ToolCalls}
		}
		return &ApprovalRequestMessage{Common: c, ToolCall: one, ToolCalls: w.ToolCalls}
	case TypeApprovalResponse:
		return &ApprovalResponseMessage{Common: c, Raw: append(json.RawMessage(nil), data...)}
	case TypeToolReturn:
		return &ToolReturnMessage{Common: c, ToolReturn: string(w.ToolReturn), Status: w.Status,
			ToolCallID: w.ToolCallID, Stdout: w.Stdout, Stderr: w.Stderr, ToolReturns: w.ToolReturns}
	case TypeError:
		return &ErrorMessage{Common: c, ErrorType: w.ErrorType, Message: w.Message, Detail: string(w.Detail)}
	case TypeStopReason:
		return &StopReason{Common: c, StopReason: w.StopReason}
	case TypeUsage:
		return &Usage{Common: c, CompletionTokens: w.CompletionTokens, PromptTokens: w.PromptTokens,
			TotalTokens: w.TotalTokens, StepCount: w.StepCount, RunIDs: w.RunIDs,
			CachedInputTokens: deref(w.CachedInputTokens), CacheWriteTokens: deref(w.CacheWriteTokens),
			ReasoningTokens: deref(w.ReasoningTokens), ContextTokens: deref(w.ContextTokens)}
	case TypePing:
		return &Ping{Common: c}
	case "":
		if rawString(w.Error) != "" || w.Code != "" {
			// {"error":"…","code":"INTERNAL_SERVER_ERROR"} after an unhandled
			// exception, or an LLM error body {"error":{type,message,detail}}.
			em := &ErrorMessage{Common: c, ErrorType: w.Code, Message: rawString(w.Error)}
			var nested struct{ Type, Message, Detail string }
			if bytes.HasPrefix(bytes.TrimSpace(w.Error), []byte("{")) && json.Unmarshal(w.Error, &nested) == nil {
				em.ErrorType, em.Message, em.Detail = firstNonEmpty(nested.Type, w.Code), nested.Message, nested.Detail
			}
			if em.ErrorType == "" {
				em.ErrorType = typeInternalServerErr
			}
			return em
		}
	}
	return &UnknownMessage{Common: c, Raw: append(json.RawMessage(nil), data...)}
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
