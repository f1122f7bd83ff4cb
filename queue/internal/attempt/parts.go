package attempt

import (
	"context"
	"log/slog"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/cancel"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/takeover"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/asynqlog"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Parts are what the worker gives every attempt: its settings, its
// observer, the reply streams and the journal (queue's, through the narrow
// views below), the chats' lines and approvals, and the facts of its Redis
// clients that decide which writes share a round trip.
type Parts struct {
	Cfg      Config
	Log      *slog.Logger // the worker's
	Obs      Observer
	Replies  replyWriter
	Journal  journalWriter
	Stores   Stores           // under the reply streams and the journal
	Writer   *progress.Writer // the turns' progress events and queued writes
	Runner   *continuation.Runner
	Letta    *agentclient.Client // the cancels of a run at Letta
	Threads  *Threads
	Takeover *takeover.Registry // nil: off
	// Cancels are the turns running here, for the cancel channel.
	Cancels cancel.Running[*cancelRun]
	// OrderKey is a message's key in its chat's line (nil: ordering off).
	OrderKey func(inbound.Message) string
	// AwaitRedis returns once Redis answers again (or ctx ends).
	AwaitRedis func(ctx context.Context)
	Trips      Trips // which writes share a round trip
	// IsFailure is the worker's asynq IsFailure (IsFailure, and under
	// ordering the line's put-back too).
	IsFailure func(error) bool
	Permanent *asynqlog.Permanent // tasks whose archiving Asynq's log line names
	Lines     *line.Lines
	Approvals *approval.Part
}

// Config is the worker's settings an attempt reads (queue.WorkerConfig's,
// with their defaults).
type Config struct {
	WorkerID          string
	Budget            budget.Config
	HeartbeatInterval time.Duration // the phase event's repeat
	DeltaMaxAge       time.Duration // answer text held without a newline
	StuckRetryDelay   time.Duration // the retry of a run still going when the budget ran out
	MaxReplyBytes     int           // the progress text one attempt writes
}

// replyWriter is the reply streams as an attempt's end writes them
// (queue.Replies).
type replyWriter interface {
	// EmitAnswerOnce writes a turn's final event once per turn.
	EmitAnswerOnce(ctx context.Context, c record.Conversation, ev record.ReplyEvent) (emitted bool, err error)
	// Answered reports whether the turn's final event was written.
	Answered(ctx context.Context, taskID string) (bool, error)
	// FinalEvent reads the turn's final event back from its chat's stream.
	FinalEvent(ctx context.Context, c record.Conversation, taskID string) (record.ReplyEvent, bool, error)
	// AnsweredKey is the key of the turn's answered marker.
	AnsweredKey(taskID string) string
}

// CancelObserver is an Observer that is also told of cancelled turns (the
// phase is one of the CancelPhase… constants). A worker's Observer that
// implements it is told.
type CancelObserver interface {
	TurnCancelled(queue, phase string)
}

// startStores are the stores an attempt's start reads (startRead).
func (w *Parts) startStores() store.StartStores {
	return store.StartStores{Journal: w.Stores.Journal, Replies: w.Stores.Replies,
		Approvals: w.Approvals.Store().Redis(), Threads: w.Threads.store()}
}
