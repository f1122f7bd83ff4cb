package store

import (
	"context"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/record"
)

// The chats are spread over a fixed number of shards; each shard is held by
// one relay replica at a time (a lease), and a shard keeps:
//
//	<prefix>relay:dirty:<shard>   sorted set: chats with events not yet applied,
//	                              scored by a version that every Mark raises
//	<prefix>relay:wake:<shard>    list of at most one item: wakes the holder's
//	                              one blocking BLPOP over all its shards
//	<prefix>relay:shard:<shard>   the lease: the holder's token, with a TTL
//
// and <prefix>relay:replicas is a sorted set of live replicas (score: last beat,
// unix ms), from which each replica computes its share of the shards.

// Shard returns c's shard among n.
func Shard(c record.Conversation, n int) int {
	h := fnv.New32a()
	h.Write([]byte(c.Integration))
	h.Write([]byte{0})
	h.Write([]byte(c.ChatID))
	return int(h.Sum32() % uint32(n))
}

func (s *Store) dirtyKey(shard int) string { return s.prefix + "relay:dirty:" + strconv.Itoa(shard) }
func (s *Store) wakeKey(shard int) string  { return s.prefix + "relay:wake:" + strconv.Itoa(shard) }

// ShardKey is the shard's lease.
func (s *Store) ShardKey(shard int) string { return s.prefix + "relay:shard:" + strconv.Itoa(shard) }

func (s *Store) replicasKey() string { return s.prefix + "relay:replicas" }

func member(c record.Conversation) string { return c.Integration + ":" + c.ChatID }

func parseMember(m string) record.Conversation {
	i, c, _ := strings.Cut(m, ":")
	return record.Conversation{Integration: i, ChatID: c}
}

var markScript = redis.NewScript(`
redis.call('ZINCRBY', KEYS[1], 1, ARGV[1])
redis.call('LPUSH', KEYS[2], '1')
redis.call('LTRIM', KEYS[2], 0, 0)
return 1
`)

// Mark records that c has new events. Marking twice is harmless (one more
// Drain that finds nothing).
func (s *Store) Mark(ctx context.Context, c record.Conversation, shards int) error {
	sh := Shard(c, shards)
	return markScript.Run(ctx, s.rdb, []string{s.dirtyKey(sh), s.wakeKey(sh)}, member(c)).Err()
}

// DirtyChat is a chat with events to apply, and its mark's version.
type DirtyChat struct {
	Chat    record.Conversation
	Version float64
}

// Dirty returns up to n chats of shard with events to apply, oldest mark
// first.
func (s *Store) Dirty(ctx context.Context, shard int, n int64) ([]DirtyChat, error) {
	zs, err := s.rdb.ZRangeWithScores(ctx, s.dirtyKey(shard), 0, n-1).Result()
	out := make([]DirtyChat, 0, len(zs))
	for _, z := range zs {
		m, _ := z.Member.(string)
		out = append(out, DirtyChat{Chat: parseMember(m), Version: z.Score})
	}
	return out, err
}

// DirtyAll is Dirty for several shards in one round trip: up to n chats of
// each, by shard.
func (s *Store) DirtyAll(ctx context.Context, shards []int, n int64) (map[int][]DirtyChat, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.ZSliceCmd, len(shards))
	for i, sh := range shards {
		cmds[i] = p.ZRangeWithScores(ctx, s.dirtyKey(sh), 0, n-1)
	}
	if _, err := p.Exec(ctx); err != nil {
		return nil, err
	}
	out := make(map[int][]DirtyChat, len(shards))
	for i, sh := range shards {
		for _, z := range cmds[i].Val() {
			m, _ := z.Member.(string)
			out[sh] = append(out[sh], DirtyChat{Chat: parseMember(m), Version: z.Score})
		}
	}
	return out, nil
}

// MarkAll is Mark for many chats in one round trip (each chat's mark, then one
// wake-up per shard).
func (s *Store) MarkAll(ctx context.Context, cs []record.Conversation, shards int) error {
	if len(cs) == 0 {
		return nil
	}
	p := s.rdb.Pipeline()
	woken := map[int]bool{}
	for _, c := range cs {
		sh := Shard(c, shards)
		p.ZIncrBy(ctx, s.dirtyKey(sh), 1, member(c))
		woken[sh] = true
	}
	for sh := range woken {
		p.LPush(ctx, s.wakeKey(sh), "1")
		p.LTrim(ctx, s.wakeKey(sh), 0, 0)
	}
	_, err := p.Exec(ctx)
	return err
}

var cleanScript = redis.NewScript(`
if tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1])) == tonumber(ARGV[2]) then
  redis.call('ZREM', KEYS[1], ARGV[1])
  return 1
end
return 0
`)

// Clean removes c's mark if no Mark came since the Dirty that returned
// version: a mark that came during the Drain keeps it dirty.
func (s *Store) Clean(ctx context.Context, d DirtyChat, shards int) error {
	return cleanScript.Run(ctx, s.rdb, []string{s.dirtyKey(Shard(d.Chat, shards))}, member(d.Chat),
		strconv.FormatFloat(d.Version, 'f', -1, 64)).Err()
}

// Wait blocks until one of shards is marked, or timeout (to the millisecond:
// a throttled edit or a typing refresh is due then).
func (s *Store) Wait(ctx context.Context, shards []int, timeout time.Duration) error {
	keys := make([]string, len(shards))
	for i, sh := range shards {
		keys[i] = s.wakeKey(sh)
	}
	var err error
	if timeout < time.Second {
		// go-redis's BLPop rounds a timeout below a second up to one second
		// (and logs it); Redis (6.0 and later) takes a fraction of a second,
		// and the client's read timeout (3 s by default) is above it.
		args := make([]any, 0, len(keys)+2)
		args = append(args, "blpop")
		for _, k := range keys {
			args = append(args, k)
		}
		args = append(args, strconv.FormatFloat(max(timeout, time.Millisecond).Seconds(), 'f', 3, 64))
		err = s.rdb.Do(ctx, args...).Err()
	} else {
		err = s.rdb.BLPop(ctx, timeout, keys...).Err()
	}
	if err == redis.Nil {
		return nil
	}
	return err
}

// AcquireShard takes shard's lease with token if it is free.
func (s *Store) AcquireShard(ctx context.Context, shard int, token string, ttl time.Duration) (bool, error) {
	return s.rdb.SetNX(ctx, s.ShardKey(shard), token, ttl).Result()
}

var renewScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// RenewShard extends shard's lease if token still holds it.
func (s *Store) RenewShard(ctx context.Context, shard int, token string, ttl time.Duration) (bool, error) {
	n, err := renewScript.Run(ctx, s.rdb, []string{s.ShardKey(shard)}, token, ttl.Milliseconds()).Int()
	return n == 1, err
}

var releaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
`)

// ReleaseShard gives shard's lease up if token holds it.
func (s *Store) ReleaseShard(ctx context.Context, shard int, token string) error {
	return releaseScript.Run(ctx, s.rdb, []string{s.ShardKey(shard)}, token).Err()
}

// Beat records replica id as alive at now, forgets replicas silent for dead,
// and returns how many are alive.
func (s *Store) Beat(ctx context.Context, id string, now time.Time, dead time.Duration) (int64, error) {
	p := s.rdb.TxPipeline()
	p.ZAdd(ctx, s.replicasKey(), redis.Z{Score: float64(now.UnixMilli()), Member: id})
	p.ZRemRangeByScore(ctx, s.replicasKey(), "-inf", strconv.FormatInt(now.Add(-dead).UnixMilli(), 10))
	n := p.ZCard(ctx, s.replicasKey())
	if _, err := p.Exec(ctx); err != nil {
		return 0, err
	}
	return n.Val(), nil
}

// Leave removes replica id from the live ones (a clean shutdown).
func (s *Store) Leave(ctx context.Context, id string) error {
	return s.rdb.ZRem(ctx, s.replicasKey(), id).Err()
}
