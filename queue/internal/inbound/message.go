package inbound

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/internal/payloadcheck"
	"github.com/lettaq/lettaq/queue/record"
)

// The Asynq task types of lettaq, the prefix of a notify event's task id,
// and the version of its payload format.
const (
	// TaskType is the Asynq task type of a turn.
	TaskType = "lettaq:turn"
	// TakeoverTaskType is the Asynq task type of a takeover: the
	// continuation of a turn whose worker died, on another worker.
	TakeoverTaskType = "lettaq:takeover"
	// NotifyTaskPrefix starts the task id of a notify event: "notify:<key>"
	// (a notify is no task, but its event carries a task id as a turn's do).
	NotifyTaskPrefix = "notify:"
	// PayloadVersion is the version of the payload format this package
	// writes and the only one it accepts.
	PayloadVersion = 1
)

// OtidNamespace is the UUID namespace of derived otids: a turn without an
// otid of its own gets uuid.NewSHA1(OtidNamespace, []byte(taskID)), the same
// on every attempt of the task.
var OtidNamespace = uuid.MustParse("8f4e6c2a-3b1d-5a7e-9c0f-1d2e3f4a5b6c")

// Message is one inbound chat message to turn into an agent turn. It is
// also the task payload (see Payload for the JSON form).
type Message struct {
	// AgentID is the Letta agent that answers. Required.
	AgentID string
	// Text is the user's message: valid UTF-8, at most MaxTextBytes;
	// required unless the message carries Images (an image-only message
	// has none) or is an Approval answer.
	Text string
	// SenderID is passed to Letta as the message's sender_id. Optional.
	SenderID string
	// Conversation names the chat the answer goes to (the reply stream).
	// Required.
	Conversation record.Conversation
	// MessageID is the integration's own id of the inbound message. When
	// set, the task id is derived from it, so a webhook delivered twice
	// makes one task. Optional.
	MessageID string
	// Otid is the turn's idempotency key at Letta; it must be a UUID.
	// Optional: by default it is derived from the task id.
	Otid string
	// Metadata is carried to the journal, small (see the Max… limits).
	Metadata map[string]string
	// LettaConversationID names the Letta conversation to send to
	// ("default" or conv-<uuid4>), for integrations that manage their own;
	// it overrides the worker's thread mode. Optional.
	LettaConversationID string
	// EnqueuedAt defaults to the time of Enqueue.
	EnqueuedAt time.Time
	// Images go to the agent next to Text (see image.go). Optional.
	Images []Image
	// Approval, when set, makes the turn the answer to an approval request
	// (see approval.go): it carries no Text or Images. Made by
	// Client.AnswerApproval.
	Approval *record.Answer
}

// Payload is the JSON form of a task's payload, version 1:
//
//	{
//	  "v": 1,                                  required, must be 1
//	  "agent_id": "agent-…",                   required
//	  "text": "hello",                         required (unless images or approval), ≤ 64 KiB, valid UTF-8
//	  "sender_id": "user-42",                  optional
//	  "conversation": {"integration": "telegram", "chat_id": "123"},  required
//	  "message_id": "9876",                    optional, the integration's id
//	  "otid": "4c6e…-uuid",                    optional, must be a UUID
//	  "metadata": {"k": "v"},                  optional, small string map
//	  "letta_conversation_id": "conv-…",       optional, "default" or conv-<uuid4>
//	  "enqueued_at": "2025-01-01T12:00:00Z",   optional, RFC 3339
//	  "images": [{"url": "https://…"}, {"media_type": "image/png", "data": "<base64>"}],
//	                                           optional, see image.go for the limits
//	  "approval": {…}                          an approval answer turn (see Answer);
//	                                           made by Client.AnswerApproval
//	}
//
// Unknown fields are ignored. A task of type TaskType ("lettaq:turn") with
// this payload may be written by any Asynq client (in any language); see
// the package documentation for the task layout.
type Payload struct {
	V            int                 `json:"v"`
	AgentID      string              `json:"agent_id"`
	Text         string              `json:"text"`
	SenderID     string              `json:"sender_id,omitempty"`
	Conversation record.Conversation `json:"conversation"`
	MessageID    string              `json:"message_id,omitempty"`
	Otid         string              `json:"otid,omitempty"`
	Metadata     map[string]string   `json:"metadata,omitempty"`
	EnqueuedAt   time.Time           `json:"enqueued_at,omitzero"`
	// LettaConversationID: see Message.
	LettaConversationID string         `json:"letta_conversation_id,omitempty"`
	Images              []Image        `json:"images,omitempty"`
	Approval            *record.Answer `json:"approval,omitempty"`
}

// Payload returns m's payload, the JSON form a task carries: for a producer
// that writes tasks itself (EncodePayload validates and marshals it).
func (m Message) Payload() Payload {
	return Payload{V: PayloadVersion, AgentID: m.AgentID, Text: m.Text, SenderID: m.SenderID,
		Conversation: m.Conversation, MessageID: m.MessageID, Otid: m.Otid, Metadata: m.Metadata,
		EnqueuedAt: m.EnqueuedAt, LettaConversationID: m.LettaConversationID, Images: m.Images, Approval: m.Approval}
}

// Message returns the message of p (DecodePayload reads and checks it).
func (p Payload) Message() Message {
	return Message{AgentID: p.AgentID, Text: p.Text, SenderID: p.SenderID, Conversation: p.Conversation,
		MessageID: p.MessageID, Otid: p.Otid, Metadata: p.Metadata, EnqueuedAt: p.EnqueuedAt,
		LettaConversationID: p.LettaConversationID, Images: p.Images, Approval: p.Approval}
}

// IsApprovalExpiry reports whether m is the scheduled expiry of an
// unanswered approval request (an answer turn with cause
// record.AnswerExpired): a pending approval, not a turn waiting for its
// line (a scheduled task's payload, decoded with DecodePayload, says which).
func (m Message) IsApprovalExpiry() bool {
	return m.Approval != nil && m.Approval.Cause == record.AnswerExpired
}

// Validate checks m against the payload rules. The error is a
// *ValidationError naming the first field at fault.
func (m Message) Validate() error {
	if err := checkID("agent_id", m.AgentID, true); err != nil {
		return err
	}
	switch {
	case m.Approval != nil:
		if err := validateAnswer(m.Approval, m); err != nil {
			return err
		}
	case m.Text == "" && len(m.Images) == 0:
		return Invalid("text", "must not be empty")
	case len(m.Text) > MaxTextBytes:
		return Invalid("text", "is %d bytes, more than the limit of %d", len(m.Text), MaxTextBytes)
	case !utf8.ValidString(m.Text):
		return Invalid("text", "is not valid UTF-8")
	case strings.IndexByte(m.Text, 0) >= 0:
		return Invalid("text", "holds a NUL character (U+0000) at byte %d: %s", strings.IndexByte(m.Text, 0), nulReason)
	}
	if err := checkImages(m.Images); err != nil {
		return err
	}
	if err := checkID("sender_id", m.SenderID, false); err != nil {
		return err
	}
	c := m.Conversation
	switch {
	case c.Integration == "":
		return Invalid("conversation.integration", "must not be empty")
	case strings.ContainsAny(c.Integration, ": \t\r\n"):
		return Invalid("conversation.integration", "%q must not contain ':' or whitespace", c.Integration)
	}
	if err := checkID("conversation.integration", c.Integration, true); err != nil {
		return err
	}
	if err := checkID("conversation.chat_id", c.ChatID, true); err != nil {
		return err
	}
	if err := checkID("message_id", m.MessageID, false); err != nil {
		return err
	}
	if err := checkID("otid", m.Otid, false); err != nil {
		return err
	}
	if m.Otid != "" {
		if _, err := uuid.Parse(m.Otid); err != nil {
			return Invalid("otid", "%q is not a UUID", m.Otid)
		}
	}
	if m.LettaConversationID != "" && !agentclient.ValidConversationID(m.LettaConversationID) {
		return Invalid("letta_conversation_id", "%q is not a Letta conversation id (want %q or conv-<uuid4>)",
			m.LettaConversationID, agentclient.DefaultConversation)
	}
	if len(m.Metadata) > MaxMetadataEntries {
		return Invalid("metadata", "has %d entries, more than %d", len(m.Metadata), MaxMetadataEntries)
	}
	total := 0
	for k, v := range m.Metadata {
		switch {
		case k == "" || len(k) > MaxMetadataKeyBytes:
			return Invalid("metadata", "key %q must be 1 to %d bytes", k, MaxMetadataKeyBytes)
		case len(v) > MaxMetadataValueBytes:
			return Invalid("metadata."+k, "is %d bytes, more than %d", len(v), MaxMetadataValueBytes)
		case !utf8.ValidString(k) || !utf8.ValidString(v):
			return Invalid("metadata."+k, "is not valid UTF-8")
		}
		total += len(k) + len(v)
	}
	if total > MaxMetadataBytes {
		return Invalid("metadata", "is %d bytes, more than %d", total, MaxMetadataBytes)
	}
	return nil
}

// nulReason is why text for the agent may not hold U+0000.
const nulReason = "Letta stores messages in PostgreSQL, whose text cannot hold it"

// checkID checks one id of m (payloadcheck.CheckID).
func checkID(field, v string, required bool) error {
	return FromFault(payloadcheck.CheckID(field, v, required))
}

// Encode validates m and returns its JSON payload: for a producer
// that writes the Asynq task itself rather than through Client.Enqueue (see
// the package documentation, "Tasks from other languages").
func Encode(m Message) ([]byte, error) {
	if err := m.Validate(); err != nil {
		return nil, err
	}
	return json.Marshal(m.Payload())
}

// TaskIDFor returns the Asynq task id of m. With a MessageID it is
// "turn:<integration>:<chat_id>:<message_id>", so that the same inbound
// message makes one task, each part with '%' and ':' percent-encoded ("%25",
// "%3A") so that distinct parts never make the same id (chat "1:2" + message
// "3" is "turn:web:1%3A2:3", chat "1" + message "2:3" is
// "turn:web:1:2%3A3"); parts without '%' or ':' read as written. An id
// longer than 200 bytes, or holding a space, becomes "turn:h:<sha256 hex>" of
// the encoded id. Without a MessageID: "turn:" and a random UUID.
func TaskIDFor(m Message) string {
	if m.MessageID == "" {
		return "turn:" + uuid.NewString()
	}
	id := "turn:" + escapeIDPart(m.Conversation.Integration) + ":" + escapeIDPart(m.Conversation.ChatID) + ":" + escapeIDPart(m.MessageID)
	if len(id) > maxTaskIDBytes || strings.ContainsAny(id, " \t\r\n\x00") {
		sum := sha256.Sum256([]byte(id))
		return "turn:h:" + hex.EncodeToString(sum[:])
	}
	return id
}

// escapeIDPart percent-encodes '%' and ':' in one part of a task id.
func escapeIDPart(s string) string {
	if !strings.ContainsAny(s, "%:") {
		return s
	}
	return strings.NewReplacer("%", "%25", ":", "%3A").Replace(s)
}

// OtidFor returns the otid of a turn: the message's own when it has one,
// else one derived from the task id (the same on every attempt).
func OtidFor(m Message, taskID string) string {
	if m.Otid != "" {
		return m.Otid
	}
	return uuid.NewSHA1(OtidNamespace, []byte(taskID)).String()
}
