package queue

import (
	"fmt"
	"strings"

	"github.com/hibiken/asynq"
)

// KeyHashTag returns the hash tag of a key prefix as Redis Cluster reads it: the text between
// the first '{' and the first '}' after it, when that text is not empty. Every key that starts
// with such a prefix hashes to the tag's slot; without one, each key hashes as a whole.
func KeyHashTag(prefix string) string {
	i := strings.IndexByte(prefix, '{')
	if i < 0 {
		return ""
	}
	j := strings.IndexByte(prefix[i+1:], '}')
	if j <= 0 {
		return ""
	}
	return prefix[i+1 : i+1+j]
}

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
	if KeyHashTag(prefix) != "" {
		return nil
	}
	return fmt.Errorf("queue: %s key prefix %q has no hash tag, but Redis is a cluster: its multi-key writes would fail with CROSSSLOT; use a prefix such as \"{lettaq}:\"", what, prefix)
}
