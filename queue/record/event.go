package record

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Conversation names one chat in one integration.
type Conversation struct {
	Integration string `json:"integration"`
	ChatID      string `json:"chat_id"`
}

// String returns "integration:chat_id".
func (c Conversation) String() string { return c.Integration + ":" + c.ChatID }

// Validate reports whether c can name a reply stream: both parts non-empty,
// and no ':' in Integration (so that keys cannot collide).
func (c Conversation) Validate() error {
	switch {
	case c.Integration == "":
		return fmt.Errorf("%w: conversation has no integration", ErrInvalidEvent)
	case strings.ContainsAny(c.Integration, ": \t\r\n"):
		return fmt.Errorf("%w: integration %q must not contain ':' or whitespace", ErrInvalidEvent, c.Integration)
	case c.ChatID == "":
		return fmt.Errorf("%w: conversation %q has no chat id", ErrInvalidEvent, c.Integration)
	}
	return nil
}

// EventType is the kind of a reply event.
type EventType string

// The reply event types.
const (
	// EventAccepted: the message was queued; Phase is "queued", Position the
	// place in the conversation's line.
	EventAccepted EventType = "accepted"
	// EventPhase: what the turn is doing now (see the Phase… constants);
	// repeated by a Heartbeat so typing indicators stay alive.
	EventPhase EventType = "phase"
	// EventTool: a tool call or its result.
	EventTool EventType = "tool"
	// EventAnswerDelta: new answer text (or, with Narration, reasoning).
	EventAnswerDelta EventType = "answer_delta"
	// EventAnswer: the whole answer, once per turn.
	EventAnswer EventType = "answer"
	// EventApprovalRequired: the agent wants to run a tool that needs approval.
	EventApprovalRequired EventType = "approval_required"
	// EventError: the turn failed; Permanent says whether it will be retried.
	EventError EventType = "error"
	// EventNotify: a message the agent's side writes into the chat of its
	// own accord (Client.Notify), answering no user message; one event,
	// its task id "notify:<key>", seq 1, Text the message (queue.Client.Notify).
	EventNotify EventType = "notify"
)

// Valid reports whether t is one of the known event types.
func (t EventType) Valid() bool {
	switch t {
	case EventAccepted, EventPhase, EventTool, EventAnswerDelta, EventAnswer, EventApprovalRequired, EventError, EventNotify:
		return true
	}
	return false
}

// Final reports whether t ends a turn for the user (answer,
// approval_required, error); EmitAnswerOnce writes only these.
func (t EventType) Final() bool {
	return t == EventAnswer || t == EventApprovalRequired || t == EventError
}

// ReplyPhase is what a turn is doing, as its phase and accepted events say
// (ReplyEvent.Phase) and the journal's timeline keeps (PhaseMark). One
// word for the user's view of a turn: the continuation's and the budget's
// phases are other things.
type ReplyPhase string

// Phases carried by phase (and accepted) events.
const (
	PhaseQueued      ReplyPhase = "queued"
	PhaseConnecting  ReplyPhase = "connecting"
	PhaseStreaming   ReplyPhase = "streaming"
	PhaseThinking    ReplyPhase = "thinking"
	PhaseToolRunning ReplyPhase = "tool_running"
	PhaseRecovering  ReplyPhase = "recovering"
	PhaseContinuing  ReplyPhase = "continuing"
	// PhaseRateLimited: Letta refused a request with 429 (its API rate
	// limit, or the model's); the turn waits and tries again.
	PhaseRateLimited ReplyPhase = "rate_limited"
	// PhaseLettaDeploying: Letta Cloud refused the message while it
	// deploys (503 cloud_api_shutting_down); sent again after Retry-After.
	PhaseLettaDeploying ReplyPhase = "letta_deploying"
	// PhaseAwaitingApproval: the message waits for the answer to its
	// chat's approval request.
	PhaseAwaitingApproval ReplyPhase = "awaiting_approval"
)

// Tool statuses carried by ToolEvent.Status.
const (
	ToolStatusCall    = "call"
	ToolStatusSuccess = "success"
	ToolStatusError   = "error"
)

// ErrInvalidEvent is returned (wrapped) when a reply event or its
// conversation cannot be written.
var ErrInvalidEvent = errors.New("record: invalid reply event")

// ToolEvent is a tool call, its result, or a call waiting for approval.
type ToolEvent struct {
	Name      string `json:"name,omitempty"`
	CallID    string `json:"call_id,omitempty"`
	Arguments string `json:"arguments,omitempty"`
	Status    string `json:"status,omitempty"`
	Return    string `json:"return,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

// ApprovalEvent is the "approval" field of reply events: on
// approval_required the request (every pending call, its expiry); on the
// accepted event of an answer turn the answer (decision, cause, reason).
type ApprovalEvent struct {
	RequestTaskID string      `json:"request_task_id"`
	Calls         []ToolEvent `json:"calls,omitempty"`
	ExpiresAt     time.Time   `json:"expires_at,omitzero"`
	Decision      string      `json:"decision,omitempty"`
	Cause         string      `json:"cause,omitempty"`
	Reason        string      `json:"reason,omitempty"`
}

// ReplyEvent is one event in a conversation's reply stream. Its JSON form
// (MarshalJSON) is the stream entry's fields with data as a nested object,
// plus "id", the stream entry id.
type ReplyEvent struct {
	// ID is the stream entry id; set by Emit and Read, ignored on input.
	ID        string
	Type      EventType
	TaskID    string
	Otid      string
	RunID     string
	MessageID string
	// Seq and Time are assigned by Emit.
	Seq  int64
	Time time.Time

	Phase      ReplyPhase
	Elapsed    time.Duration // sent in whole milliseconds
	Position   int
	Text       string
	Narration  bool
	Parts      []string
	Tool       *ToolEvent
	StopReason string
	Permanent  bool
	AnsweredBy string
	// Approval: the request (approval_required) or the answer (accepted
	// event of an answer turn); see queue.Client.AnswerApproval.
	Approval *ApprovalEvent
}

// data is the wire form (the stream entry's data field) of the type-specific fields. Pointer fields are
// the ones that are always present for some types.
type data struct {
	Phase      ReplyPhase     `json:"phase,omitempty"`
	ElapsedMS  int64          `json:"elapsed_ms,omitempty"`
	Position   *int           `json:"position,omitempty"`
	Text       *string        `json:"text,omitempty"`
	Narration  bool           `json:"narration,omitempty"`
	Parts      *[]string      `json:"parts,omitempty"`
	Tool       *ToolEvent     `json:"tool,omitempty"`
	StopReason string         `json:"stop_reason,omitempty"`
	Permanent  *bool          `json:"permanent,omitempty"`
	AnsweredBy string         `json:"answered_by,omitempty"`
	Approval   *ApprovalEvent `json:"approval,omitempty"`
}

// dataOf is ev's data field.
func dataOf(ev ReplyEvent) data {
	d := data{
		Phase:      ev.Phase,
		ElapsedMS:  ev.Elapsed.Milliseconds(),
		Narration:  ev.Narration,
		Tool:       ev.Tool,
		StopReason: ev.StopReason,
		AnsweredBy: ev.AnsweredBy,
		Approval:   ev.Approval,
	}
	if ev.Position != 0 || ev.Type == EventAccepted {
		p := ev.Position
		d.Position = &p
	}
	if ev.Text != "" || ev.Type == EventAnswerDelta || ev.Type == EventAnswer || ev.Type == EventError {
		t := ev.Text
		d.Text = &t
	}
	if len(ev.Parts) > 0 || ev.Type == EventAnswer {
		p := ev.Parts
		if p == nil {
			p = []string{}
		}
		d.Parts = &p
	}
	if ev.Permanent || ev.Type == EventError {
		p := ev.Permanent
		d.Permanent = &p
	}
	return d
}

// apply sets ev's type-specific fields from d.
func (d data) apply(ev *ReplyEvent) {
	ev.Phase = d.Phase
	ev.Elapsed = time.Duration(d.ElapsedMS) * time.Millisecond
	if d.Position != nil {
		ev.Position = *d.Position
	}
	if d.Text != nil {
		ev.Text = *d.Text
	}
	ev.Narration = d.Narration
	if d.Parts != nil {
		ev.Parts = *d.Parts
	}
	ev.Tool = d.Tool
	ev.StopReason = d.StopReason
	if d.Permanent != nil {
		ev.Permanent = *d.Permanent
	}
	ev.AnsweredBy = d.AnsweredBy
	ev.Approval = d.Approval
}

// DataJSON returns e's data field as a stream entry carries it: the
// type-specific fields as compact JSON (docs/reply-events.md).
func (e ReplyEvent) DataJSON() ([]byte, error) { return json.Marshal(dataOf(e)) }

// SetDataJSON sets e's type-specific fields from a stream entry's data
// field (what DataJSON writes); on an error e is unchanged.
func (e *ReplyEvent) SetDataJSON(b []byte) error {
	var d data
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	d.apply(e)
	return nil
}

// replyEventJSON is the JSON form of a ReplyEvent: the wire fields, with
// data as an object and seq as a number.
type replyEventJSON struct {
	ID        string    `json:"id,omitempty"`
	Type      EventType `json:"type"`
	TaskID    string    `json:"task_id"`
	Otid      string    `json:"otid"`
	RunID     string    `json:"run_id"`
	MessageID string    `json:"message_id"`
	Seq       int64     `json:"seq"`
	Time      string    `json:"time"`
	Data      data      `json:"data"`
}

// MarshalJSON encodes e in the same shape as a stream entry (see the wire
// format), with data as a nested object, seq as a number and the entry id as
// "id". `enqueue --wait` prints events this way.
func (e ReplyEvent) MarshalJSON() ([]byte, error) {
	w := replyEventJSON{
		ID: e.ID, Type: e.Type, TaskID: e.TaskID, Otid: e.Otid, RunID: e.RunID,
		MessageID: e.MessageID, Seq: e.Seq, Data: dataOf(e),
	}
	if !e.Time.IsZero() {
		w.Time = e.Time.UTC().Format(time.RFC3339Nano)
	}
	return json.Marshal(w)
}

// UnmarshalJSON decodes the form MarshalJSON writes.
func (e *ReplyEvent) UnmarshalJSON(b []byte) error {
	var w replyEventJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = ReplyEvent{
		ID: w.ID, Type: w.Type, TaskID: w.TaskID, Otid: w.Otid, RunID: w.RunID,
		MessageID: w.MessageID, Seq: w.Seq,
	}
	if w.Time != "" {
		t, err := time.Parse(time.RFC3339Nano, w.Time)
		if err != nil {
			return fmt.Errorf("queue: reply event time: %w", err)
		}
		e.Time = t
	}
	w.Data.apply(e)
	return nil
}
