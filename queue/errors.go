package queue

import (
	"errors"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/record"
)

// The errors a caller tests for with errors.Is (they come wrapped).
var (
	// ErrNotFound: the journal has no record of the turn, or it has
	// expired (Journal.Get, Client.Cancel).
	ErrNotFound = errors.New("queue: turn record not found")
	// ErrNoApproval: no approval request is known by the given task id or
	// otid (Client.AnswerApproval, Client.Approve, Client.Deny).
	ErrNoApproval = approval.ErrNoRequest
	// ErrInvalidEvent: a reply event or its conversation cannot be
	// written (Replies.Emit).
	ErrInvalidEvent = record.ErrInvalidEvent
)
