package queue

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
)

// batchOutage is the outage the errors a round trip gives its items show:
// the first error when every item failed and it is not Redis refusing a
// command for a reason of its own (a wrong type, a script error: that
// item's trouble, not the writer's), else nil.
func batchOutage(batch []taken) error {
	var first error
	for _, tk := range batch {
		for _, err := range tk.errs {
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
	}
	if !isOutage(first) {
		return nil
	}
	return first
}

// isOutage reports whether err says Redis cannot be reached or cannot take
// writes now (a connection error, a timeout, a server loading its data,
// that is a replica, or that is full: maxmemory reached under noeviction
// refuses every write with OOM while it still answers reads and PING),
// rather than refusing a command of ours.
func isOutage(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // not a reply: the connection, a timeout, a closed client
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "OOM"} {
		if redis.HasErrorPrefix(re, p) {
			return true
		}
	}
	return false
}

// Ready reports whether the worker can start and finish turns: nil, or
// why not (its writes to Redis fail, or Asynq cannot take tasks off the
// queue, write its state or extend its tasks' leases). It never waits on
// Redis; once Redis is back it says so by itself: while it is not ready, a
// probe (at most once a second) sends a small write (ProbeWrite's) through
// the writer and a PING on Asynq's own connection. The worker's HTTP server
// answers /readyz with it.
func (w *Worker) Ready() error { return w.health.Ready(w.probe) }

// ProbeWrite makes one small write to Redis, as a readiness probe does (a
// SET of a key of this worker's own, <prefix>ready:<worker id>, that
// expires by itself within seconds): nil when Redis takes writes. Unlike a
// PING it fails when Redis answers but refuses writes (full: OOM under
// noeviction; a replica: READONLY).
func (w *Worker) ProbeWrite(ctx context.Context) error {
	return store.QueueReadyProbe(ctx, w.replies.rdb, w.replies.keys(), w.cfg.WorkerID).Err()
}

// probe runs one round trip of the writer (ProbeWrite's write: its result
// is the writer's health), then, when it went through, PINGs Redis on
// Asynq's connection: an answer there ends the trouble Asynq's lines since
// started told of.
func (w *Worker) probe(started time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), writerTimeout)
	defer cancel()
	p := w.writer.newProgress(Conversation{}, func(error) {})
	defer p.close()
	err := p.do(ctx, nil, func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
		return store.QueueReadyProbe(ctx, pl, w.replies.keys(), w.cfg.WorkerID).Err
	})
	if err != nil {
		return
	}
	if srv := w.srv.Load(); srv != nil && srv.Ping() == nil {
		w.health.AsynqBack(started)
	}
}
