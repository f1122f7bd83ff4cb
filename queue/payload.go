package queue

import "github.com/lettaq/lettaq/queue/internal/inbound"

// The Asynq task types of lettaq, the prefix of a notify event's task id,
// and the version of its payload format.
const (
	// TaskType is the Asynq task type of a turn.
	TaskType = inbound.TaskType
	// TakeoverTaskType is the Asynq task type of a takeover: the
	// continuation of a turn whose worker died, on another worker.
	TakeoverTaskType = inbound.TakeoverTaskType
	// NotifyTaskPrefix starts the task id of a notify event: "notify:<key>"
	// (a notify is no task, but its event carries a task id as a turn's do).
	NotifyTaskPrefix = inbound.NotifyTaskPrefix
	// PayloadVersion is the version of the payload format this package
	// writes and the only one it accepts.
	PayloadVersion = inbound.PayloadVersion
)

// Message is one inbound chat message to turn into an agent turn. It is
// also the task payload (see Payload for the JSON form).
type Message = inbound.Message

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
//	  "approval": {…}                          an approval answer turn (see record.Answer);
//	                                           made by Client.AnswerApproval
//	}
//
// Unknown fields are ignored. A task of type TaskType ("lettaq:turn") with
// this payload may be written by any Asynq client (in any language); see
// the package documentation for the task layout.
type Payload = inbound.Payload

// EncodePayload validates m and returns its JSON payload: for a producer
// that writes the Asynq task itself rather than through Client.Enqueue (see
// the package documentation, "Tasks from other languages").
func EncodePayload(m Message) ([]byte, error) { return inbound.Encode(m) }

// TaskIDFor returns the Asynq task id of m. With a MessageID it is
// "turn:<integration>:<chat_id>:<message_id>", so that the same inbound
// message makes one task, each part with '%' and ':' percent-encoded ("%25",
// "%3A") so that distinct parts never make the same id (chat "1:2" + message
// "3" is "turn:web:1%3A2:3", chat "1" + message "2:3" is
// "turn:web:1:2%3A3"); parts without '%' or ':' read as written. An id
// longer than 200 bytes, or holding a space, becomes "turn:h:<sha256 hex>" of
// the encoded id. Without a MessageID: "turn:" and a random UUID.
func TaskIDFor(m Message) string { return inbound.TaskIDFor(m) }

// OtidFor returns the otid of a turn: the message's own when it has one,
// else one derived from the task id (the same on every attempt).
func OtidFor(m Message, taskID string) string { return inbound.OtidFor(m, taskID) }
