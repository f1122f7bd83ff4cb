package queue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/asynqlog"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/health"
	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/takeover"
	"github.com/lettaq/lettaq/queue/shard"
)

// WorkerConfig configures a Worker: give it to NewWorker. Redis is required;
// the zero value of every other field takes its default.
type WorkerConfig struct {
	// Redis is the Asynq connection; reply events and the journal use the
	// same Redis.
	Redis asynq.RedisConnOpt
	// Letta is the agent client. When nil, one is made from LettaURL,
	// LettaAPIKey and StreamTransport.
	Letta           *agentclient.Client
	LettaURL        string
	LettaAPIKey     string
	StreamTransport agentclient.StreamTransport
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
	// Observer, default NopObserver.
	Observer Observer
	// Ordering: one turn at a time per conversation, in enqueue order (on
	// by default; see Ordering and package ordering).
	Ordering Ordering
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
	// ThreadMode: which Letta thread a chat talks to (default
	// ThreadConversation; see thread.go).
	ThreadMode ThreadMode
	// ApprovalPolicy: what a message does while its chat's approval
	// request is unanswered (default ApprovalWait; see approval.go).
	ApprovalPolicy ApprovalPolicy
	// ApprovalTimeout: an unanswered approval request is denied this long
	// after it was made (default 24h).
	ApprovalTimeout time.Duration
	// ParkSweepEvery: how often the worker looks for waiting turns that a
	// worker left parked in no Asynq queue (it died between the two steps
	// of a park; see queue/internal/line), default 30s.
	ParkSweepEvery time.Duration
	// TakeoverAfter: a worker whose beats stop this long is taken for dead
	// and its running turns are continued by another worker (fast
	// takeover, see takeover.go; default DefaultTakeoverAfter). Negative:
	// off, a dead worker's turns wait for Asynq's recovery (60 to 165 s).
	TakeoverAfter time.Duration
	// TakeoverBeat: how often the worker beats and watches the others'
	// beats (default 1s, at most TakeoverAfter/3).
	TakeoverBeat time.Duration
	// MaxReplyBytes bounds the text (answer deltas, tool arguments and
	// returns) one attempt of a turn writes to its reply stream as progress
	// events; past it, progress text is dropped (the final event still
	// carries the whole answer). Default DefaultMaxReplyBytes.
	MaxReplyBytes int
}

// Worker runs turns from the queue: make one with NewWorker, call Run until
// its context is done, and serve Ready as the process's readiness.
type Worker struct {
	cfg        WorkerConfig
	log        *slog.Logger
	obs        Observer
	letta      // the agent client and the continuation runner (conns.go)
	redisConns // the Redis option and client the worker makes and closes (conns.go)
	lifecycle  // Run's once, Asynq's server, the handlers in flight, what a shutdown cancels (lifecycle.go; Run: run.go)
	replies    *Replies
	journal    *Journal
	ord        *orderer       // nil: no ordering
	lines      *line.Lines    // the chats' lines: places, parking, waking, the sweep (queue/internal/line)
	attempts   *attempt.Parts // what every attempt uses of the worker (queue/internal/attempt)
	approvals  *approval.Part
	writer     *progress.Writer   // the turns' progress events and queued writes
	permanent  asynqlog.Permanent // tasks whose handler's error was permanent, until Asynq logs their archiving
	health     health.Health      // what Ready says
	tk         *takeover.Registry // the takeover registry (nil: off)
	layouts    []shard.Layout     // the deployment's layouts Run claims (shards.go)
}

// oneRedis reports whether the journal and the reply streams are on one
// client, so that their writes can share a round trip (the writer's).
func (w *Worker) oneRedis() bool { return w.journal.rdb == w.replies.rdb }

// seqOnWorkerRedis reports whether the sequencer's client is on the
// worker's Redis (w.rdb): it is that client, or one made from the same
// option.
func (w *Worker) seqOnWorkerRedis() bool {
	return w.ord != nil && w.rdb != nil && (w.ord.rdb != nil || w.ord.seq.Client() == w.rdb)
}

// startWithLock reports whether a turn's ordering acquire and its start's
// reads share a round trip, the writer's: when the sequencer, the journal
// and the reply streams (the writer's) are on one client of a single Redis
// (on Cluster a pipeline's commands for different nodes do not run in
// order).
func (w *Worker) startWithLock() bool {
	if w.ord == nil || !w.oneRedis() {
		return false
	}
	_, ok := w.journal.rdb.(*redis.Client)
	return ok && w.ord.seq.Client() == w.journal.rdb
}

// processTask is the asynq handler of one attempt of one turn: the worker
// counts it in flight (a shutdown waits for it) and gives it a context that
// a shutdown cancels; the attempt is queue/internal/attempt's (Parts.Process).
func (w *Worker) processTask(ctx context.Context, task *asynq.Task) error {
	w.inflight.Add(1)
	defer w.inflight.Done()
	ctx, stopped, cancel := w.stops.Add(ctx)
	defer stopped()
	return w.attempts.Process(ctx, task, cancel)
}

// Replies returns the reply streams the worker writes: to read them in the
// worker's own process (its HTTP handlers, a relay beside it).
func (w *Worker) Replies() *Replies { return w.replies }

// Journal returns the journal the worker writes: to read turns' records in
// the worker's own process.
func (w *Worker) Journal() *Journal { return w.journal }

// Handler returns the asynq.Handler that runs one turn per task (for tests,
// or to mount on an asynq.ServeMux of your own under TaskType). A task
// handled this way should be run with ServerConfig's RetryDelayFunc and
// IsFailure.
func (w *Worker) Handler() asynq.Handler { return asynq.HandlerFunc(w.processTask) }

// ServerConfig returns the asynq.Config Run uses. Under ordering, its
// IsFailure and RetryDelayFunc also know the put-back of a turn that
// waits for its conversation (ordering.IsFailure, ordering.RetryPolicy).
func (w *Worker) ServerConfig() asynq.Config {
	retry := asynq.RetryDelayFunc(attempt.RetryDelay)
	if w.ord != nil {
		retry = ordering.RetryPolicy{Fallback: attempt.RetryDelay}.Func()
	}
	return asynq.Config{
		Concurrency:              w.cfg.Concurrency,
		TaskCheckInterval:        w.cfg.TaskCheckInterval,
		DelayedTaskCheckInterval: w.cfg.DelayedTaskCheckInterval,
		RetryDelayFunc:           retry,
		IsFailure:                w.isFailure,
		Queues:                   w.cfg.Queues,
		ShutdownTimeout:          w.cfg.ShutdownTimeout,
		Logger:                   asynqlog.New(w.log.With(slog.String("component", "asynq")), &w.permanent, &w.health),
		LogLevel:                 asynq.WarnLevel,
		ErrorHandler: asynq.ErrorHandlerFunc(func(ctx context.Context, _ *asynq.Task, err error) {
			if id, ok := asynq.GetTaskID(ctx); ok && errors.Is(err, asynq.SkipRetry) {
				w.permanent.Add(id)
			}
		}),
	}
}

// isFailure is ServerConfig's IsFailure: an attempt's error that uses one
// of the task's retries (IsFailure, and under ordering ordering.IsFailure).
func (w *Worker) isFailure(err error) bool {
	if w.ord != nil {
		return attempt.IsFailure(err) && ordering.IsFailure(err)
	}
	return attempt.IsFailure(err)
}

// awaitRedis returns once Redis answers again, or when ctx (the attempt's
// task context: its deadline, a lost Asynq lease, a shutdown) is done. An
// attempt that saw a Redis write fail calls it before it releases its
// conversation and hands its result to Asynq: Asynq v0.26 records how an
// attempt ended (done, retry, archive) with one write, and when that write
// fails its syncer retries it with a context that is already cancelled, so
// the task stays active until its lease expires and Asynq's recoverer takes
// it back, 60 to 120 s later (and under ordering its conversation waits as
// long). Redis must answer on the worker's own connection first (a PING
// bounded by a context), then on Asynq's (Server.Ping, which takes no
// context and so is only tried once Redis is reachable): go-redis fails
// every dial on a connection pool at once for up to a second after many
// failed dials, each pool on its own.
func (w *Worker) awaitRedis(ctx context.Context) {
	backoff := 50 * time.Millisecond
	for {
		pctx, cancel := context.WithTimeout(ctx, time.Second)
		err := w.replies.rdb.Ping(pctx).Err()
		cancel()
		if err == nil {
			if srv := w.srv.Load(); srv != nil {
				err = srv.Ping()
			}
			if err == nil {
				return
			}
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}
