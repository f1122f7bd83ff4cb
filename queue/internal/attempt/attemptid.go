package attempt

import (
	"time"

	"github.com/hibiken/asynq"
	"github.com/lettaq/lettaq/queue/internal/inbound"
)

// ID is who an attempt is: its task, the turn it runs (task id,
// queue, otid, message), its retries used and allowed, and when it started
// (its hold of the conversation's key, with ordering). The turn embeds it;
// its completer gets a copy.
type ID struct {
	Task              *asynq.Task
	TaskID, Queue     string
	Otid              string
	Msg               inbound.Message
	Retried, MaxRetry int
	Start             time.Time
}
