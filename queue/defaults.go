package queue

import (
	"time"

	"github.com/lettaq/lettaq/queue/internal/pace"
)

// defaultDeltaMaxAge is how long text without a newline waits before it
// goes out as an answer_delta event (WorkerConfig.Timing.DeltaMaxAge).
const defaultDeltaMaxAge = pace.DefaultDeltaMaxAge

// defaultHeartbeatInterval is how often a waiting turn repeats its phase
// (WorkerConfig.Timing.HeartbeatInterval).
const defaultHeartbeatInterval = pace.DefaultHeartbeatInterval

// DefaultStreamTTL is how long a reply stream keeps its events by default
// (RepliesOptions.StreamTTL): the journal's default retention
// (JournalOptions.Retention), so that a turn's events go with its record.
const DefaultStreamTTL = 7 * 24 * time.Hour

// defaultQueue is the Asynq queue turns go to unless configured otherwise.
const defaultQueue = "lettaq"
