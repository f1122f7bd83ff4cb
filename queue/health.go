package queue

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

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
	ctx, cancel := context.WithTimeout(context.Background(), progress.TripTimeout)
	defer cancel()
	p := w.writer.NewQueue(record.Conversation{}, func(error) {}, nil)
	defer p.Close()
	err := p.Do(ctx, nil, func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
		return store.QueueReadyProbe(ctx, pl, w.replies.keys(), w.cfg.WorkerID).Err
	})
	if err != nil {
		return
	}
	if srv := w.srv.Load(); srv != nil && srv.Ping() == nil {
		w.health.AsynqBack(started)
	}
}
