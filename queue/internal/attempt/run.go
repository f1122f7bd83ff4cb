package attempt

import (
	"context"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/record"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/tools"
)

// What the run at Letta (LettaRun) is given besides the worker's parts: the
// worker's settings it reads, the journal's intents, the attempt's record
// saves and the part that ends the attempt with what the run left.

// Config is the worker's settings an attempt reads (queue.WorkerConfig's,
// with their defaults).
type Config struct {
	WorkerID          string
	Budget            budget.Config
	HeartbeatInterval time.Duration // the phase event's repeat
	DeltaMaxAge       time.Duration // answer text held without a newline
}

// Intents journals an attempt's intent to send (queue.Journal's).
type Intents interface {
	// IntentOp is the write of the intent, sent with the attempt's queued
	// writes; prior gets the intents journaled before it.
	IntentOp(taskID, otid string, attempt int, worker string, prior *[]record.Intent) (store.Op, error)
	// RecordIntent writes the intent now and returns the prior ones.
	RecordIntent(ctx context.Context, taskID, otid string, attempt int, worker string) ([]record.Intent, error)
}

// RecordSaver saves the attempt's journal record: now, after everything
// the attempt queued (Save), or with its next writes (SaveLater).
type RecordSaver interface {
	Save(ctx context.Context, more ...store.Op) error
	SaveLater()
}

// Ender ends the attempt with what its run left: it decides how (EndOf)
// and applies the end.
type Ender interface {
	Ran(ctx context.Context, r *RunEnd) error
}

// RunEnd is what the run at Letta leaves for its attempt's end (LettaRun.finish
// gathers it): the continuation's decision and what the stream saw.
type RunEnd struct {
	D          continuation.Result
	Snap       agentclient.Snapshot
	Tools      []*tools.Call // the run's tool calls as the chat was told of them
	FirstToken time.Time     // the answer's first token (zero: none)
	// Cancel is the turn's cancel, asked before the run was decided (nil:
	// none), and CancelPhase the phase it came in.
	Cancel      *record.CancelRecord
	CancelPhase string
	// Cause is what interrupted an Interrupted run (the lease's loss; nil:
	// the decision's error).
	Cause error
	// ImageNote prefixes the reason of a rejected message with images
	// ("" none: see LettaRun.imageRejected).
	ImageNote string
	// Finish ends the chat's live view of the run once the end is decided
	// (live.Stream.Finish: answered flushes the answer's last deltas).
	Finish func(answered bool)
}
