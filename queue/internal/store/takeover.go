package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// The takeover registry (issue 30): which worker processes are alive and
// which turns each one runs, so that a surviving worker can continue the
// turns of one that died long before Asynq's lease would give them back.
// Its keys, under the worker's key prefix:
//
//	P takeover:workers          ZSET  member: a worker's instance id; score: its last beat (Redis's clock, ms)
//	P takeover:turns:<instance> HASH  field: a turn's task id; value: its TakeoverEntry (JSON, package queue's)
//	P takeover:dead:<instance>  STRING the tombstone of a claimed worker (value: the claimer)
//	P takeover:taken:<task id>  STRING the runner (Asynq task id) of the turn's newest takeover
//
// The times are Redis's (TIME), so that the workers' clocks do not matter.

// TakeoverWorkers is the set of live workers by last beat.
func (k Keys) TakeoverWorkers() string { return k.Prefix + "takeover:workers" }

// TakeoverTurns is the hash of the turns a worker instance runs.
func (k Keys) TakeoverTurns(instance string) string { return k.Prefix + "takeover:turns:" + instance }

// TakeoverDead is the tombstone of a claimed worker instance.
func (k Keys) TakeoverDead(instance string) string { return k.Prefix + "takeover:dead:" + instance }

// TakeoverClaimed keeps a minute the turns of a claimed worker instance,
// for the claim's call sent again (see takeoverClaim).
func (k Keys) TakeoverClaimed(instance string) string {
	return k.Prefix + "takeover:claimed:" + instance
}

// TakenOver names the runner of a turn's newest takeover.
func (k Keys) TakenOver(taskID string) string { return k.Prefix + "takeover:taken:" + taskID }

// takeoverBeat records a worker's beat and returns the workers whose last
// beat is older than the takeover delay.
//
// KEYS: workers, dead:<me>, turns:<me>
// ARGV: me, after_ms
// Returns {-1} when me is tombstoned (nothing written); else {1 when me had
// a score before (0: the registry lost it), HLEN turns:<me>, stale...}.
var takeoverBeat = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local had = redis.call('ZSCORE', KEYS[1], ARGV[1]) and 1 or 0
redis.call('ZADD', KEYS[1], now, ARGV[1])
local out = {had, redis.call('HLEN', KEYS[3])}
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])), 'LIMIT', 0, 100)
for _, id in ipairs(stale) do
  if id ~= ARGV[1] then out[#out + 1] = id end
end
return out
`)

// takeoverClaim claims a dead worker: only when its last beat is still
// older than the takeover delay, it leaves the set, gets its tombstone
// (the claimer and the call's token), and its turns hash is returned and
// moved to claimed:<it> for a minute. Exactly one claimer gets them. A call
// sent again (its reply lost after it ran: go-redis retries) finds its own
// token in the tombstone and gets the same turns from claimed:<it>, which
// it would otherwise lose for good.
//
// KEYS: workers, dead:<it>, turns:<it>, claimed:<it>
// ARGV: it, after_ms, tombstone_ttl_ms, claimer, token
// Returns nil when not claimed; else the hash as {field, value, ...}.
var takeoverClaim = redis.NewScript(`
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  if redis.call('GET', KEYS[2]) == ARGV[4] .. ' ' .. ARGV[5] then return redis.call('HGETALL', KEYS[4]) end
  return false
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) >= now - tonumber(ARGV[2]) then return false end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[4] .. ' ' .. ARGV[5], 'PX', ARGV[3])
local h = redis.call('HGETALL', KEYS[3])
if #h > 0 then
  redis.call('RENAME', KEYS[3], KEYS[4])
  redis.call('PEXPIRE', KEYS[4], 60000)
end
return h
`)

// Takeover is the registry's store.
type Takeover struct {
	rdb  redis.UniversalClient
	keys Keys
}

// NewTakeover returns the takeover registry on rdb under keys.
func NewTakeover(rdb redis.UniversalClient, keys Keys) *Takeover {
	return &Takeover{rdb: rdb, keys: keys}
}

// Beat is what a beat found.
type Beat struct {
	// Tombstoned: the worker was claimed by another (it was taken for
	// dead); the beat wrote nothing.
	Tombstoned bool
	// Lost: the worker had no score before this beat (Redis lost the
	// registry, or this is the first beat).
	Lost bool
	// Turns is the number of turns the registry holds for the worker.
	Turns int
	// Stale are the other workers whose last beat is older than after.
	Stale []string
}

// Beat records instance's beat and lists the stale workers.
func (s *Takeover) Beat(ctx context.Context, instance string, after time.Duration) (Beat, error) {
	k := s.keys
	v, err := takeoverBeat.Run(ctx, s.rdb, []string{k.TakeoverWorkers(), k.TakeoverDead(instance), k.TakeoverTurns(instance)},
		instance, after.Milliseconds()).Slice()
	if err != nil {
		return Beat{}, err
	}
	if len(v) == 1 {
		return Beat{Tombstoned: true}, nil
	}
	if len(v) < 2 {
		return Beat{}, fmt.Errorf("store: takeover beat: unexpected reply %v", v)
	}
	had, _ := v[0].(int64)
	n, _ := v[1].(int64)
	b := Beat{Lost: had == 0, Turns: int(n)}
	for _, x := range v[2:] {
		if id, ok := x.(string); ok {
			b.Stale = append(b.Stale, id)
		}
	}
	return b, nil
}

// Claim claims the dead worker instance for claimer: its turns (task id →
// entry), and ok false when it was not claimed (alive again, or claimed by
// another).
func (s *Takeover) Claim(ctx context.Context, instance, claimer string, after, tombstoneTTL time.Duration) (map[string]string, bool, error) {
	k := s.keys
	v, err := takeoverClaim.Run(ctx, s.rdb, []string{k.TakeoverWorkers(), k.TakeoverDead(instance), k.TakeoverTurns(instance), k.TakeoverClaimed(instance)},
		instance, after.Milliseconds(), tombstoneTTL.Milliseconds(), claimer, uuid.NewString()).StringSlice()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	turns := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		turns[v[i]] = v[i+1]
	}
	return turns, true, nil
}

// Register notes that instance runs the turn taskID (entry: its JSON).
func (s *Takeover) Register(ctx context.Context, instance, taskID string, entry []byte) error {
	return s.rdb.HSet(ctx, s.keys.TakeoverTurns(instance), taskID, entry).Err()
}

// RegisterOp is Register as an op of a writer's round trip.
func (s *Takeover) RegisterOp(instance, taskID string, entry []byte) Op {
	return s.hashOp(func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.HSet(ctx, s.keys.TakeoverTurns(instance), taskID, entry)
	})
}

// UnregisterOp is Unregister as an op of a turn's last round trip; done is
// told when it was written.
func (s *Takeover) UnregisterOp(instance, taskID string, done func()) Op {
	op := s.hashOp(func(ctx context.Context, p redis.Pipeliner) redis.Cmder {
		return p.HDel(ctx, s.keys.TakeoverTurns(instance), taskID)
	})
	return func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
		finish := op(ctx, p, sha)
		return func() error {
			err := finish()
			if err == nil {
				done()
			}
			return err
		}
	}
}

// hashOp queues one command (in the round trip's first pass only: a second
// pass is for scripts Redis did not know).
func (s *Takeover) hashOp(cmd func(context.Context, redis.Pipeliner) redis.Cmder) Op {
	return func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
		if !sha {
			return func() error { return nil }
		}
		c := cmd(ctx, p)
		return func() error { return c.Err() }
	}
}

// RegisterAll writes every turn of instance (field → entry) again, after
// the registry was lost.
func (s *Takeover) RegisterAll(ctx context.Context, instance string, turns map[string][]byte) error {
	if len(turns) == 0 {
		return nil
	}
	args := make([]any, 0, 2*len(turns))
	for id, e := range turns {
		args = append(args, id, e)
	}
	return s.rdb.HSet(ctx, s.keys.TakeoverTurns(instance), args...).Err()
}

// Unregister notes that instance no longer runs taskID.
func (s *Takeover) Unregister(ctx context.Context, instance, taskID string) error {
	return s.rdb.HDel(ctx, s.keys.TakeoverTurns(instance), taskID).Err()
}

// Leave takes instance out of the registry (a graceful stop: its turns
// were put back through Asynq, and are not taken over).
func (s *Takeover) Leave(ctx context.Context, instance string) error {
	p := s.rdb.TxPipeline()
	p.ZRem(ctx, s.keys.TakeoverWorkers(), instance)
	p.Del(ctx, s.keys.TakeoverTurns(instance))
	_, err := p.Exec(ctx)
	return err
}

// Tombstoned reports whether instance was claimed for dead.
func (s *Takeover) Tombstoned(ctx context.Context, instance string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.TakeoverDead(instance)).Result()
	return n > 0, err
}

// MarkTakenOver records runner as the newest runner of the turn taskID.
func (s *Takeover) MarkTakenOver(ctx context.Context, taskID, runner string, ttl time.Duration) error {
	return s.rdb.Set(ctx, s.keys.TakenOver(taskID), runner, ttl).Err()
}

// TakenOverBy returns the runner of the turn's newest takeover, "" when
// it was never taken over.
func (s *Takeover) TakenOverBy(ctx context.Context, taskID string) (string, error) {
	v, err := s.rdb.Get(ctx, s.keys.TakenOver(taskID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
