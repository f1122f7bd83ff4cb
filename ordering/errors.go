package ordering

import (
	"errors"
	"fmt"
)

// NotYourTurnError is returned by Acquire when the task may not run now:
// another task is ahead of it in its key's line, or the key is busy. It is
// not a failure: the caller puts the task back (IsFailure says false) and
// tries again soon (RetryDelay says when).
type NotYourTurnError struct {
	// Key is the conversation key.
	Key string
	// Position is the task's 0-based place in the line (0 when it is the
	// head but the lock is still held by a task that left the line).
	Position int
	// Head is the task that runs next (or is running).
	Head string
	// HeadHeld reports whether the key's lock is held, i.e. a turn of this
	// key is running now.
	HeadHeld bool
	// RemovedDead is how many dead heads this Acquire removed: then Head
	// is a new head, which nobody else wakes (the turn ahead of it will
	// never end), so the caller should (Sequencer.Wake).
	RemovedDead int
}

func (e *NotYourTurnError) Error() string {
	state := "waiting"
	if e.HeadHeld {
		state = "running"
	}
	return fmt.Sprintf("ordering: not your turn on %q: position %d, head %s is %s", e.Key, e.Position, e.Head, state)
}

// IsNotYourTurn reports whether err is (or wraps) a *NotYourTurnError.
func IsNotYourTurn(err error) bool {
	var e *NotYourTurnError
	return errors.As(err, &e)
}

// MergedError is returned by Acquire for a task that TakeFollowers merged
// into an earlier turn: its text was (or will be) answered by that turn,
// and its own execution should end at once, successfully.
type MergedError struct {
	Key    string
	TaskID string
	// Into is the head task whose turn took this task's message.
	Into string
}

func (e *MergedError) Error() string {
	return fmt.Sprintf("ordering: task %s on %q was merged into %s (answered by %s)", e.TaskID, e.Key, e.Into, e.Into)
}

// IsMerged reports whether err is (or wraps) a *MergedError.
func IsMerged(err error) bool {
	var e *MergedError
	return errors.As(err, &e)
}

var (
	// ErrNotJoined: Acquire of a task that is not in its key's line, with
	// Config.NoAutoJoin set.
	ErrNotJoined = errors.New("ordering: task is not in the line")
	// ErrDone: Acquire of a task whose turn already finished (Release with
	// done): a duplicate delivery. The handler should end successfully.
	ErrDone = errors.New("ordering: task already finished its turn")
	// ErrNotHead: TakeFollowers called for a task that is not the head.
	ErrNotHead = errors.New("ordering: task is not the head of the line")
	// ErrLeaseLost is the cause of a Lease's Context when its lock was lost.
	ErrLeaseLost = errors.New("ordering: lease lost")
	// ErrInvalidKey: an empty key, or one with '{' or '}' (they would break
	// the Redis Cluster hash tag); build keys with ConversationKey/AgentKey.
	ErrInvalidKey = errors.New("ordering: invalid key")
)
