package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Parking keeps the turns that wait: an attempt that finds it
// must wait (not its turn in its conversation's line, or an approval
// request open) writes a parking record and ends its Asynq task (revoked:
// deleted, no retry used); the worker enqueues the task again with the
// same id as soon as Asynq has deleted it, scheduled far ahead (the safety
// net), and deletes the record. While the record exists the task may be
// in no Asynq queue at all: the record holds everything needed to enqueue
// it again (a worker that died in between: the sweeper, Due), and says
// why it waits. An index (a sorted set by park time) lets the sweeper
// find old records.
//
//	P park:<task>             HASH   see the Parked fields; PX ParkTTL
//	P park:idx                ZSET   member task id, score park time in ms;
//	                                 PX ParkTTL from the newest park
//	P park:behind:<request>   HASH   task id → queue "\n" line key: the turns
//	                                 that wait for an approval request's
//	                                 answer, in any line; PX ParkTTL
type Parking struct {
	RDB  redis.UniversalClient
	Keys Keys
}

// ParkTTL bounds how long a parking record outlives everything: the
// sweeper deletes records long before (a record is normally gone within
// milliseconds of its park).
const ParkTTL = 7 * 24 * time.Hour

// Parked is one parking record.
type Parked struct {
	TaskID    string
	Type      string
	Payload   []byte
	Queue     string
	MaxRetry  int
	Timeout   time.Duration
	Deadline  time.Time // zero: none
	Retention time.Duration
	// Behind is what the turn waits for (a task id, or "approval request
	// <id>"); Reason says it for people.
	Behind, Reason string
	// Key is the turn's conversation line (ordering key), "" without one.
	Key string
	// Since: when the turn parked this time.
	Since time.Time
	// Woken: the turn ahead ended while the task was parked: it is
	// enqueued to run now, not scheduled.
	Woken bool
	// Dropped: the turn was cancelled while parked (Drop): it is not
	// enqueued again, or deleted again once it was.
	Dropped bool
	// Gen names this park (a task parks again after it ran again): Take
	// deletes the record only of the park it names.
	Gen string
}

// ParkKeys names the keys of parked turns: a turn's record and what the
// last take found, the turns waiting behind a request, the index.
type ParkKeys struct{ keys Keys }

// Record is the parking record of taskID.
func (p ParkKeys) Record(taskID string) string { return p.keys.TaskPrefix(taskID) + "park:" + taskID }

// Took keeps a minute what the last Take of taskID's record found
// (see parkTake).
func (p ParkKeys) Took(taskID string) string {
	return p.keys.TaskPrefix(taskID) + "park:took:" + taskID
}

// Waiters lists the turns that wait behind an approval request.
func (p ParkKeys) Waiters(requestTaskID string) string {
	return p.keys.TaskPrefix(requestTaskID) + "park:behind:" + requestTaskID
}

// Index is the index of parking records. It stays under Prefix with
// any number of shards: it is written in a pipeline of its own (no script
// or MULTI spans it and a record), it holds only the turns parked now, and
// one index costs the sweep one read, not one per shard.
func (p ParkKeys) Index() string { return p.keys.Prefix + "park:idx" }

// Park writes p (replacing an older record of the task) and indexes it.
func (s Parking) Park(ctx context.Context, p Parked) error {
	key := s.Keys.Park().Record(p.TaskID)
	dl := int64(0)
	if !p.Deadline.IsZero() {
		dl = p.Deadline.Unix()
	}
	_, err := s.RDB.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Del(ctx, key)
		pl.HSet(ctx, key, "type", p.Type, "payload", p.Payload, "queue", p.Queue,
			"max_retry", p.MaxRetry, "timeout_ms", p.Timeout.Milliseconds(), "deadline", dl,
			"retention_ms", p.Retention.Milliseconds(), "behind", p.Behind, "reason", p.Reason,
			"key", p.Key, "since_ms", p.Since.UnixMilli(), "gen", p.Gen)
		pl.PExpire(ctx, key, ParkTTL)
		pl.ZAdd(ctx, s.Keys.Park().Index(), redis.Z{Score: float64(p.Since.UnixMilli()), Member: p.TaskID})
		// The index outlives its newest record: with no park for ParkTTL
		// every record it lists has expired.
		pl.PExpire(ctx, s.Keys.Park().Index(), ParkTTL)
		return nil
	})
	return err
}

// parkWake marks a parking record woken, if it exists.
//
// KEYS: record. Returns 1 when it exists.
var parkWake = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'woken', '1')
return 1
`)

// parkDrop marks a parking record dropped, if it exists.
//
// KEYS: record. Returns 1 when it exists.
var parkDrop = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'dropped', '1')
return 1
`)

// parkTake deletes a parking record of one park and says whether it was
// woken or dropped. What it said is kept a minute under the record's
// "took" key with the call's token: a call sent again (its reply lost after
// it ran: go-redis retries) says the same, instead of "none" (a woken turn
// would then wait for its recheck, a dropped one be left in Asynq).
//
// KEYS: record, took. ARGV: gen ("": any), token. Returns -1 when there is
// none (or another park's), else 2 (dropped), 1 (woken) or 0.
var parkTake = redis.NewScript(`
if redis.call('EXISTS', KEYS[1]) == 0 then
  local took = redis.call('GET', KEYS[2])
  if took then
    local tok, r = string.match(took, '^(%S+) (%d)$')
    if tok == ARGV[2] then return tonumber(r) end
  end
  return -1
end
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'gen') ~= ARGV[1] then return -1 end
local w = redis.call('HGET', KEYS[1], 'woken')
local d = redis.call('HGET', KEYS[1], 'dropped')
redis.call('DEL', KEYS[1])
local r = 0
if d == '1' then r = 2 elseif w == '1' then r = 1 end
redis.call('SET', KEYS[2], ARGV[2] .. ' ' .. r, 'PX', 60000)
return r
`)

// Wake marks taskID's record woken; false when it has none.
func (s Parking) Wake(ctx context.Context, taskID string) (bool, error) {
	n, err := parkWake.Run(ctx, s.RDB, []string{s.Keys.Park().Record(taskID)}).Int()
	return n == 1, err
}

// Drop marks taskID's record dropped (its turn is cancelled); false when
// it has none.
func (s Parking) Drop(ctx context.Context, taskID string) (bool, error) {
	n, err := parkDrop.Run(ctx, s.RDB, []string{s.Keys.Park().Record(taskID)}).Int()
	return n == 1, err
}

// Taken says what Take found.
type Taken struct{ Found, Woken, Dropped bool }

// Take deletes taskID's record of the park gen ("": whichever) and its
// index entry, and says whether it was woken or dropped meanwhile.
func (s Parking) Take(ctx context.Context, taskID, gen string) (Taken, error) {
	n, err := parkTake.Run(ctx, s.RDB, []string{s.Keys.Park().Record(taskID), s.Keys.Park().Took(taskID)}, gen, uuid.NewString()).Int()
	if err != nil {
		return Taken{}, err
	}
	if n < 0 {
		return Taken{}, nil
	}
	tk := Taken{Found: true, Woken: n == 1, Dropped: n == 2}
	return tk, s.RDB.ZRem(ctx, s.Keys.Park().Index(), taskID).Err()
}

// ErrNotParked: no parking record has that task id.
var ErrNotParked = errors.New("not parked")

// Get reads taskID's record (ErrNotParked when there is none).
func (s Parking) Get(ctx context.Context, taskID string) (Parked, error) {
	m, err := s.RDB.HGetAll(ctx, s.Keys.Park().Record(taskID)).Result()
	if err != nil {
		return Parked{}, err
	}
	if len(m) == 0 {
		return Parked{}, ErrNotParked
	}
	num := func(f string) int64 { n, _ := strconv.ParseInt(m[f], 10, 64); return n }
	p := Parked{TaskID: taskID, Type: m["type"], Payload: []byte(m["payload"]), Queue: m["queue"],
		MaxRetry: int(num("max_retry")), Timeout: time.Duration(num("timeout_ms")) * time.Millisecond,
		Retention: time.Duration(num("retention_ms")) * time.Millisecond,
		Behind:    m["behind"], Reason: m["reason"], Key: m["key"],
		Since: time.UnixMilli(num("since_ms")), Woken: m["woken"] == "1", Dropped: m["dropped"] == "1", Gen: m["gen"]}
	if dl := num("deadline"); dl > 0 {
		p.Deadline = time.Unix(dl, 0)
	}
	return p, nil
}

// Due lists up to limit task ids parked before t (oldest first).
func (s Parking) Due(ctx context.Context, t time.Time, limit int) ([]string, error) {
	return s.RDB.ZRangeByScore(ctx, s.Keys.Park().Index(), &redis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(t.UnixMilli(), 10), Count: int64(limit)}).Result()
}

// Unindex removes taskID from the index (its record is gone).
func (s Parking) Unindex(ctx context.Context, taskID string) error {
	return s.RDB.ZRem(ctx, s.Keys.Park().Index(), taskID).Err()
}

// AddWaiter notes that taskID (in queue, on line key) waits for the answer
// to approval request requestTaskID.
func (s Parking) AddWaiter(ctx context.Context, requestTaskID, taskID, queue, key string) error {
	k := s.Keys.Park().Waiters(requestTaskID)
	_, err := s.RDB.Pipelined(ctx, func(pl redis.Pipeliner) error {
		pl.HSet(ctx, k, taskID, queue+"\n"+key)
		pl.PExpire(ctx, k, ParkTTL)
		return nil
	})
	return err
}

// Waiter is a turn that waits for an approval request's answer.
type Waiter struct{ TaskID, Queue, Key string }

// TakeWaiters returns and forgets the turns that wait for the answer to
// approval request requestTaskID.
func (s Parking) TakeWaiters(ctx context.Context, requestTaskID string) ([]Waiter, error) {
	k := s.Keys.Park().Waiters(requestTaskID)
	var all *redis.MapStringStringCmd
	_, err := s.RDB.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		all = pl.HGetAll(ctx, k)
		pl.Del(ctx, k)
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []Waiter
	for id, v := range all.Val() {
		q, key, _ := strings.Cut(v, "\n")
		out = append(out, Waiter{TaskID: id, Queue: q, Key: key})
	}
	return out, nil
}
