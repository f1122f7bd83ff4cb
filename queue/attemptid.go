package queue

import (
	"time"

	"github.com/hibiken/asynq"
)

// attemptID is who an attempt is: its task, the turn it runs (task id,
// queue, otid, message), its retries used and allowed, and when it started
// (its hold of the conversation's key, with ordering). The turn embeds it;
// its completer gets a copy.
type attemptID struct {
	task              *asynq.Task
	taskID, queue     string
	otid              string
	msg               Message
	retried, maxRetry int
	start             time.Time
}
