package queue

import "github.com/lettaq/lettaq/queue/internal/pace"

// defaultDeltaMaxAge is how long text without a newline waits before it
// goes out as an answer_delta event (WorkerConfig.Timing.DeltaMaxAge).
const defaultDeltaMaxAge = pace.DefaultDeltaMaxAge

// defaultHeartbeatInterval is how often a waiting turn repeats its phase
// (WorkerConfig.Timing.HeartbeatInterval).
const defaultHeartbeatInterval = pace.DefaultHeartbeatInterval

// defaultQueue is the Asynq queue turns go to unless configured otherwise.
const defaultQueue = "lettaq"
