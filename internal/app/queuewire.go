package app

import (
	"context"
	"log/slog"
	"net/http"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// queueRunner runs the queue worker. (Placeholder until queue.Worker lands.)
type queueRunner struct {
	enqueue http.Handler
}

func newQueueRunner(cfg WorkerConfig, connOpt asynq.RedisConnOpt, rdb redis.UniversalClient, lettaURL string, m *Metrics, logger *slog.Logger) (*queueRunner, error) {
	return &queueRunner{}, nil
}

func (q *queueRunner) enqueueHandler() http.Handler { return q.enqueue }

func (q *queueRunner) run(ctx context.Context) error {
	<-ctx.Done()
	return nil
}
