package queue

import (
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// WorkerConfig configures a Worker: give it to NewWorker. Redis is required;
// the zero value of every other field, and of every field of its groups
// (Letta, Stores, Timing, Approvals, Takeover), takes its default.
type WorkerConfig struct {
	// Redis is the Asynq connection; reply events and the journal use the
	// same Redis.
	Redis asynq.RedisConnOpt
	// Letta: how the worker reaches the Letta server.
	Letta LettaConnection
	// Budget bounds every attempt; zero value: budget.Default().
	Budget budget.Config
	// Concurrency: turns in flight at once (default 100).
	Concurrency int
	// Queues to work on, with priorities; default {"lettaq": 1}. With
	// Shards > 1, one queue: the base name of the shards' queues.
	Queues map[string]int
	// Shards is the number of shards the deployment's chats are spread
	// over (LETTAQ_SHARDS; default 1). With more than one, the worker takes
	// turns from every shard's queue with equal weights (package
	// queue/shard). Run refuses to start under a layout other than the
	// deployment's recorded one (*shard.MismatchError).
	Shards int
	// ShutdownTimeout: on shutdown, how long turns in flight may finish;
	// after that they are interrupted and put back (default 10s).
	ShutdownTimeout time.Duration
	// Logger, default slog.Default().
	Logger *slog.Logger
	// WorkerID names this worker in the journal (default hostname:pid).
	WorkerID string
	// Stores: where the worker writes reply events and turn records.
	Stores WorkerStores
	// Observer, default NopObserver.
	Observer Observer
	// Ordering: one turn at a time per conversation, in enqueue order (on
	// by default; see Ordering and package ordering).
	Ordering Ordering
	// Timing: how often the worker polls, beats and flushes progress.
	Timing WorkerTiming
	// ThreadMode: which Letta thread a chat talks to (default
	// ThreadConversation; see thread.go).
	ThreadMode ThreadMode
	// Approvals: what the worker does with a chat's tool approval requests.
	Approvals ApprovalRules
	// Takeover: how soon another worker continues the turns of a worker
	// that died.
	Takeover FastTakeover
	// MaxReplyBytes bounds the text (answer deltas, tool arguments and
	// returns) one attempt of a turn writes to its reply stream as progress
	// events; past it, progress text is dropped (the final event still
	// carries the whole answer). Default DefaultMaxReplyBytes.
	MaxReplyBytes int
}

// LettaConnection is how a worker reaches the Letta server
// (WorkerConfig.Letta). Set Client to share an agent client with the rest
// of your process (the worker does not close it); otherwise set URL and,
// when the server wants one, APIKey, and the worker makes its client.
type LettaConnection struct {
	// Client is the agent client. When nil, one is made from URL, APIKey
	// and StreamTransport.
	Client *agentclient.Client
	// URL is the Letta server's base URL.
	URL string
	// APIKey is the Letta server's key (never logged).
	APIKey string
	// StreamTransport: how the client's streams reach the server (default
	// agentclient.StreamDedicated).
	StreamTransport agentclient.StreamTransport
}

// WorkerStores is where a worker writes the reply events of turns and their
// records (WorkerConfig.Stores). Leave it zero and the worker makes both on
// the Asynq Redis; set Replies, Journal and RedisClient to share them with
// the rest of your process (its HTTP handlers, a relay beside it), or the
// options to change their key prefix and retention.
type WorkerStores struct {
	// Replies and Journal, when nil, are made on the Asynq Redis with
	// RepliesOptions and JournalOptions.
	Replies        *Replies
	RepliesOptions RepliesOptions
	Journal        *Journal
	JournalOptions JournalOptions
	// RedisClient, when set, is a go-redis client on the Redis of Redis
	// that the worker uses for its own reads and writes (Replies and
	// Journal when nil, ordering, task results) instead of making one; it
	// does not close it. Give the one your Replies and Journal use: a turn's
	// writes of different kinds then share round trips (its start's reads
	// with its ordering acquire; its final event, record, task result and
	// release). A worker given Replies and Journal without it writes ordering
	// and task results apart.
	RedisClient redis.UniversalClient
	// ReplyPartLimits sets RepliesOptions.PartLimits (per-integration answer
	// part size) when Replies is nil.
	ReplyPartLimits map[string]int
}

// WorkerTiming is how often a worker polls Redis, repeats a turn's phase
// and flushes answer text, and when it retries a stuck turn
// (WorkerConfig.Timing). Set it to trade pickup latency and progress
// smoothness against Redis load (tests set it short); zero fields take the
// defaults.
type WorkerTiming struct {
	// TaskCheckInterval: how often an idle worker polls Redis for new tasks
	// (Asynq's TaskCheckInterval; default 100ms, the pickup latency).
	TaskCheckInterval time.Duration
	// DelayedTaskCheckInterval: how often retries that are due are moved
	// back to the queue (default 1s; at most 1s under ordering, where
	// waiting turns are put back as retries).
	DelayedTaskCheckInterval time.Duration
	// HeartbeatInterval repeats the phase event (default 4s).
	HeartbeatInterval time.Duration
	// DeltaMaxAge: how long answer text without a newline is held before an
	// answer_delta (default 1s).
	DeltaMaxAge time.Duration
	// StuckRetryDelay: when to retry a turn whose run was still going when
	// its attempt's budget ran out (default 1s).
	StuckRetryDelay time.Duration
	// ParkSweepEvery: how often the worker looks for waiting turns that a
	// worker left parked in no Asynq queue (it died between the two steps
	// of a park; see queue/internal/line), default 30s.
	ParkSweepEvery time.Duration
}

// withDefaults gives the zero fields their defaults (ParkSweepEvery's is
// queue/internal/line's); under ordering, waiting turns are put back as
// retries, so DelayedTaskCheckInterval is at most a second.
func (t WorkerTiming) withDefaults(ordered bool) WorkerTiming {
	if t.TaskCheckInterval <= 0 {
		t.TaskCheckInterval = 100 * time.Millisecond
	}
	if t.DelayedTaskCheckInterval <= 0 {
		t.DelayedTaskCheckInterval = time.Second
	}
	if t.HeartbeatInterval <= 0 {
		t.HeartbeatInterval = defaultHeartbeatInterval
	}
	if t.StuckRetryDelay <= 0 {
		t.StuckRetryDelay = time.Second
	}
	if ordered && t.DelayedTaskCheckInterval > time.Second {
		t.DelayedTaskCheckInterval = time.Second
	}
	return t
}

// ApprovalRules is what a worker does while a chat's tool approval request
// is unanswered (WorkerConfig.Approvals; see approval.go). Set it when
// messages should not wait for the answer, or requests should expire
// sooner or later than a day.
type ApprovalRules struct {
	// Policy: what a message does while its chat's approval request is
	// unanswered (default ApprovalWait).
	Policy ApprovalPolicy
	// Timeout: an unanswered approval request is denied this long after it
	// was made (default 24h, at most MaxApprovalTimeout).
	Timeout time.Duration
}

// FastTakeover is how soon the turns of a worker that died are continued
// by another worker (WorkerConfig.Takeover; see takeover.go). Set After to
// trade the wait of a dead worker's chats against a slow worker being
// taken for dead, or negative to turn fast takeover off.
type FastTakeover struct {
	// After: a worker whose beats stop this long is taken for dead and its
	// running turns are continued by another worker (default
	// DefaultTakeoverAfter). Negative: off, a dead worker's turns wait for
	// Asynq's recovery (60 to 165 s).
	After time.Duration
	// Beat: how often the worker beats and watches the others' beats
	// (default 1s, at most After/3).
	Beat time.Duration
}

// withDefaults gives After and, when takeover is on, Beat their defaults,
// and keeps Beat at most After/3.
func (t FastTakeover) withDefaults() FastTakeover {
	if t.After == 0 {
		t.After = DefaultTakeoverAfter
	}
	if t.After > 0 {
		if t.Beat <= 0 {
			t.Beat = defaultTakeoverBeat
		}
		t.Beat = min(t.Beat, t.After/3)
	}
	return t
}
