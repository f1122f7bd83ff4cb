package app

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// enqueueRedisWait bounds enqueue's first PING: a Redis that does not answer by then is taken
// as absent.
const enqueueRedisWait = 3 * time.Second

// checkEnqueueRedis PINGs Redis before enqueue does anything else. When it does not answer it
// writes one message naming the address and what to do, and returns false (exit ExitNoRedis).
func checkEnqueueRedis(ctx context.Context, rdb redis.UniversalClient, o *enqueueOpts, connOpt asynq.RedisConnOpt, stderr io.Writer) bool {
	pctx, cancel := context.WithTimeout(ctx, enqueueRedisWait)
	defer cancel()
	err := rdb.Ping(pctx).Err()
	if err == nil {
		return true
	}
	addr := redisAddr(connOpt)
	if o.dev {
		fmt.Fprintf(stderr, "enqueue: no Redis at %s (is the dev worker running? start it with `worker --dev`, or `go run ./cmd/worker --dev` in a clone): %v\n", addr, err)
	} else {
		fmt.Fprintf(stderr, "enqueue: no Redis at %s (is REDIS_URL / --redis-url the workers' Redis, and is it running?): %v\n", addr, err)
	}
	return false
}
