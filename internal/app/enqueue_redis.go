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

// checkEnqueueRedis PINGs Redis before enqueue does anything else and returns ExitOK when it
// answers. When it does not it writes one message naming the address and what to do, and
// returns ExitNoRedis; when it refuses the credentials, ExitUsage (a configuration error).
func checkEnqueueRedis(ctx context.Context, rdb redis.UniversalClient, o *enqueueOpts, connOpt asynq.RedisConnOpt, stderr io.Writer) int {
	pctx, cancel := context.WithTimeout(ctx, enqueueRedisWait)
	defer cancel()
	err := rdb.Ping(pctx).Err()
	if err == nil {
		return ExitOK
	}
	addr := redisAddr(connOpt)
	if cerr := redisRefusedCredentials(err, addr); cerr != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", cerr)
		return ExitUsage
	}
	if o.dev {
		// The dev worker must listen where this enqueue looks: the same dev Redis address
		// and key prefix, which o.commandLine repeats when not the default.
		if workerCommand == "go run ./cmd/worker" {
			fmt.Fprintf(stderr, "enqueue: no Redis at %s (is the dev worker running? start it with `%s`): %v\n",
				addr, o.commandLine(workerCommand), err)
		} else {
			fmt.Fprintf(stderr, "enqueue: no Redis at %s (is the dev worker running? start it with `%s`, or `%s` in a clone): %v\n",
				addr, o.commandLine(workerCommand), o.commandLine("go run ./cmd/worker"), err)
		}
	} else {
		fmt.Fprintf(stderr, "enqueue: no Redis at %s (is REDIS_URL / --redis-url the workers' Redis, and is it running?): %v\n", addr, err)
	}
	return ExitNoRedis
}
