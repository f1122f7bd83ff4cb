package ordering

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// RenewState reports what the renewer of s holds: the leases it renews,
// whether its timer is armed, and whether a tick is running.
func RenewState(s *Sequencer) (held int, armed, running bool) {
	s.renew.mu.Lock()
	defer s.renew.mu.Unlock()
	return len(s.renew.held), s.renew.armed, s.renew.running
}

// ExtendScripts returns the SHA1 of the one-lock and many-lock extend
// scripts.
func ExtendScripts() (one, many string) { return extendLua.Hash(), extendManyLua.Hash() }

// LoadExtendScripts loads both extend scripts, so that a test's first
// renewal is not an EVALSHA answered NOSCRIPT followed by an EVAL.
func LoadExtendScripts(ctx context.Context, rdb redis.Scripter) error {
	if err := extendLua.Load(ctx, rdb).Err(); err != nil {
		return err
	}
	return extendManyLua.Load(ctx, rdb).Err()
}

// RenewChunk is how many locks one multi-lock extend call carries at most.
const RenewChunk = renewChunk

// LockKey is the Redis key of key's lock.
func LockKey(s *Sequencer, key string) string { return s.lockKey(key) }

// JoinsState reports the joins queued behind a round trip of joins in
// flight, and whether one is in flight.
func JoinsState(s *Sequencer) (queued int, busy bool) {
	s.joins.mu.Lock()
	defer s.joins.mu.Unlock()
	return len(s.joins.queue), s.joins.busy
}

// JoinAlone is Join in a round trip of its own (Join before its joins were
// batched), for BenchmarkConcurrentJoins.
func JoinAlone(ctx context.Context, s *Sequencer, key, taskID string) (int, error) {
	res, err := joinLua.Call(ctx, s.rdb, append(joinLua.Args(3, 2), s.lineKey(key), s.doneKey(key, taskID), s.mergedKey(key, taskID),
		taskID, s.nowMs())).Int64Slice()
	if err != nil {
		return 0, err
	}
	return int(res[0]), nil
}
