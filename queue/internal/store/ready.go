package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// Ready is the key a worker's readiness probe writes (QueueReadyProbe):
// one per worker, expiring by itself.
func (k Keys) Ready(worker string) string { return k.Prefix + "ready:" + worker }

// readyTTL is how long a probe's key lives: a few probes' time (they come
// every second or so), so that the keys of workers gone leave by
// themselves and one worker's never grows.
const readyTTL = 10 * time.Second

// QueueReadyProbe queues on p the readiness probe's write: a SET of the
// worker's own key with a short TTL. Unlike a PING it fails when Redis
// answers but refuses writes (full under noeviction: OOM; a replica:
// READONLY), and its memory is one small key per worker.
func QueueReadyProbe(ctx context.Context, p redis.Cmdable, k Keys, worker string) *redis.StatusCmd {
	return p.Set(ctx, k.Ready(worker), "1", readyTTL)
}
