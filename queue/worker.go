package queue

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

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
		TaskCheckInterval:        w.cfg.Timing.TaskCheckInterval,
		DelayedTaskCheckInterval: w.cfg.Timing.DelayedTaskCheckInterval,
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
