package queue

import (
	"fmt"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/hashtag"
)

// checkClusterPrefix refuses, on Redis Cluster, a reply or journal key prefix without a hash
// tag ("" is the default "lettaq:"): their scripts and MULTIs touch several keys at once, which
// a cluster runs only when they share a slot (CROSSSLOT otherwise, on every turn).
func checkClusterPrefix(conn asynq.RedisConnOpt, what, prefix string) error {
	switch conn.(type) {
	case asynq.RedisClusterClientOpt, *asynq.RedisClusterClientOpt:
	default:
		return nil
	}
	if prefix == "" {
		prefix = "lettaq:"
	}
	if hashtag.Of(prefix) != "" {
		return nil
	}
	return fmt.Errorf("queue: %s key prefix %q has no hash tag, but Redis is a cluster: its multi-key writes would fail with CROSSSLOT; use a prefix such as \"{lettaq}:\"", what, prefix)
}
