package store

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// The takeover registry: which worker processes are alive and
// which turns each one runs, so that a surviving worker can continue the
// turns of one that died long before Asynq's lease would give them back.
// Its keys, under the worker's key prefix:
//
//	P takeover:workers          ZSET  member: a worker's instance id; score: its last beat (Redis's clock, ms)
//	P takeover:turns:<instance> HASH  field: a turn's task id; value: its TakeoverEntry (JSON, package queue's)
//	P takeover:dead:<instance>  STRING the tombstone of a claimed worker (value: the claimer and the claim's token)
//	P takeover:claimed:<instance> HASH the claimed worker's turns, kept a minute for the claim sent again
//	P takeover:beat:<instance>  STRING JSON [token, had, lost]: what the last beat that found something found, a minute
//	P takeover:taken:<task id>  STRING the runner (Asynq task id) of the turn's newest takeover
//	P takeover:holder:<task id> STRING who runs the turn: "<instance>\n<runner>" (the newest registration)
//	P takeover:number:<task id> STRING the holder's runner number (the journal's: see Registration.Number)
//	P takeover:lost:<instance>  SET    "<task id>\n<runner>" of the instance's turns that another runner registered since
//
// One runner of a turn at a time: a runner's registration takes the
// turn's holder over (unless a live holder has a higher runner number), takes the turn out of the previous holder's hash (so
// that a claim of that instance no longer finds it) and tells the previous
// holder through its lost set, which its next beat reads: it stops that
// runner. The times are Redis's (TIME), so that the workers' clocks do not
// matter. The scripts build the keys of other instances from the prefix
// (ARGV): every key here shares the prefix's hash tag, so one slot.

// TakeoverKeys names the takeover registry's keys, all under the prefix's
// "takeover:" (Keys.Takeover).
type TakeoverKeys struct{ prefix string }

// Takeover returns the names of the takeover registry's keys.
func (k Keys) Takeover() TakeoverKeys { return TakeoverKeys{k.Prefix + "takeover:"} }

// Workers is the set of live workers by last beat.
func (k TakeoverKeys) Workers() string { return k.prefix + "workers" }

// Turns is the hash of the turns a worker instance runs.
func (k TakeoverKeys) Turns(instance string) string { return k.prefix + "turns:" + instance }

// Dead is the tombstone of a claimed worker instance.
func (k TakeoverKeys) Dead(instance string) string { return k.prefix + "dead:" + instance }

// Claimed keeps a minute the turns of a claimed worker instance, for the
// claim's call sent again (see takeoverClaim).
func (k TakeoverKeys) Claimed(instance string) string { return k.prefix + "claimed:" + instance }

// BeatMemo keeps a minute what a worker instance's last beat found (see
// takeoverBeat).
func (k TakeoverKeys) BeatMemo(instance string) string { return k.prefix + "beat:" + instance }

// Holder names the instance and runner that run a turn now.
func (k TakeoverKeys) Holder(taskID string) string { return k.prefix + "holder:" + taskID }

// Number is the runner number of a turn's holder.
func (k TakeoverKeys) Number(taskID string) string { return k.prefix + "number:" + taskID }

// Lost lists the turns of an instance that another runner took.
func (k TakeoverKeys) Lost(instance string) string { return k.prefix + "lost:" + instance }

// Taken names the runner of a turn's newest takeover.
func (k TakeoverKeys) Taken(taskID string) string { return k.prefix + "taken:" + taskID }

// takeoverBeat records a worker's beat and returns the workers whose last
// beat is older than the takeover delay, and the turns another runner took
// from it since its last beat. A beat that found the registry without it,
// or took turns out of its lost set, keeps what it found a minute in
// beat:<me> with the call's token: a call sent again (its reply lost after
// it ran: go-redis retries) says the same, instead of "nothing taken" (the
// worker would keep running turns that have a new runner) and "not lost"
// (it would not write its turns back).
//
// KEYS: workers, dead:<me>, turns:<me>, lost:<me>, beat:<me>
// ARGV: me, after_ms, token
// Returns {-1} when me is tombstoned (nothing written); else {1 when me had
// a score before (0: the registry lost it), HLEN turns:<me>, {stale...},
// {lost...}}.
var takeoverBeat = redis.NewScript(`
if redis.call('EXISTS', KEYS[2]) == 1 then return {-1} end
local had, lost
local memo = redis.call('GET', KEYS[5])
if memo then
  local v = cjson.decode(memo)
  if v[1] == ARGV[3] then had = v[2]; lost = v[3] end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if not had then
  had = redis.call('ZSCORE', KEYS[1], ARGV[1]) and 1 or 0
  lost = redis.call('SMEMBERS', KEYS[4])
  if #lost > 0 then redis.call('DEL', KEYS[4]) end
  if had == 0 or #lost > 0 then
    redis.call('SET', KEYS[5], cjson.encode({ARGV[3], had, lost}), 'PX', 60000)
  end
end
redis.call('ZADD', KEYS[1], now, ARGV[1])
local stale = {}
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. (now - tonumber(ARGV[2])), 'LIMIT', 0, 100)) do
  if id ~= ARGV[1] then stale[#stale + 1] = id end
end
return {had, redis.call('HLEN', KEYS[3]), stale, lost}
`)

// takeoverRegister registers a runner of a turn under its instance and
// makes it the turn's holder. A holder that is another runner loses the
// turn: it is taken out of that instance's hash (unless that is me's: the
// field is overwritten) and told through its lost set. Nothing is written
// when the holder is alive (its instance not tombstoned, its last beat
// within after, the turn in its hash) and either take is off (a registry
// written back after Redis lost it, or a registration that did not reach
// it) or the holder's runner number is higher than me's (it started later:
// its journal saves are the ones that write the record, see
// Registration.Number).
//
// KEYS: turns:<me>, holder:<task>, workers, number:<task>
// ARGV: me, task, entry, runner, take (1/0), holder_ttl_ms, lost_ttl_ms, prefix, after_ms, number (0: none)
// Returns 1 when registered; 0 when not, a live holder, without take; -1
// when not, a live holder numbered higher.
var takeoverRegister = evalcmd.New(`
local mine = ARGV[1] .. '\n' .. ARGV[4]
local n = tonumber(ARGV[10])
local cur = redis.call('GET', KEYS[2])
if cur and cur ~= mine then
  local sep = string.find(cur, '\n', 1, true)
  if sep then
    local inst = string.sub(cur, 1, sep - 1)
    local old = ARGV[8] .. 'takeover:turns:' .. inst
    local function alive()
      if redis.call('EXISTS', ARGV[8] .. 'takeover:dead:' .. inst) == 1 then return false end
      local s = redis.call('ZSCORE', KEYS[3], inst)
      local t = redis.call('TIME')
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      return s and tonumber(s) >= now - tonumber(ARGV[9]) and redis.call('HEXISTS', old, ARGV[2]) == 1
    end
    if ARGV[5] ~= '1' and alive() then return 0 end
    if n > 0 and n < tonumber(redis.call('GET', KEYS[4]) or '0') and alive() then return -1 end
    if inst ~= ARGV[1] then redis.call('HDEL', old, ARGV[2]) end
    local lost = ARGV[8] .. 'takeover:lost:' .. inst
    redis.call('SADD', lost, ARGV[2] .. '\n' .. string.sub(cur, sep + 1))
    redis.call('PEXPIRE', lost, ARGV[7])
  end
end
redis.call('HSET', KEYS[1], ARGV[2], ARGV[3])
redis.call('SET', KEYS[2], mine, 'PX', ARGV[6])
if n > 0 then
  redis.call('SET', KEYS[4], n, 'PX', ARGV[6])
else
  redis.call('DEL', KEYS[4])
end
return 1
`)

// takeoverUnregister takes a runner's turn out of its instance's hash and
// ends its hold, unless another runner on the same instance holds the turn
// now (the field is that runner's).
//
// KEYS: turns:<me>, holder:<task>, number:<task>
// ARGV: me, task, runner
var takeoverUnregister = evalcmd.New(`
local mine = ARGV[1] .. '\n' .. ARGV[3]
local cur = redis.call('GET', KEYS[2])
if cur == mine then
  redis.call('DEL', KEYS[2], KEYS[3])
elseif cur and string.sub(cur, 1, #ARGV[1] + 1) == ARGV[1] .. '\n' then
  return 0
end
redis.call('HDEL', KEYS[1], ARGV[2])
return 1
`)

// takeoverLiveHolder returns the turn's holder when its instance is alive:
// not tombstoned, its last beat within after, the turn in its hash.
//
// KEYS: holder:<task>, workers
// ARGV: task, after_ms, prefix
var takeoverLiveHolder = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if not cur then return false end
local sep = string.find(cur, '\n', 1, true)
if not sep then return false end
local inst = string.sub(cur, 1, sep - 1)
if redis.call('EXISTS', ARGV[3] .. 'takeover:dead:' .. inst) == 1 then return false end
local s = redis.call('ZSCORE', KEYS[2], inst)
if not s then return false end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
if tonumber(s) < now - tonumber(ARGV[2]) then return false end
if redis.call('HEXISTS', ARGV[3] .. 'takeover:turns:' .. inst, ARGV[1]) == 0 then return false end
return cur
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
	// Taken are the worker's turns that another runner registered since
	// the last beat: the runners to stop.
	Taken []Holder
}

// Holder is a runner of a turn.
type Holder struct {
	TaskID   string
	Instance string // "" in Beat.Taken: the beating worker
	Runner   string
}

// Beat records instance's beat and lists the stale workers.
func (s *Takeover) Beat(ctx context.Context, instance string, after time.Duration) (Beat, error) {
	k := s.keys
	v, err := takeoverBeat.Run(ctx, s.rdb, []string{k.Takeover().Workers(), k.Takeover().Dead(instance), k.Takeover().Turns(instance),
		k.Takeover().Lost(instance), k.Takeover().BeatMemo(instance)}, instance, after.Milliseconds(), uuid.NewString()).Slice()
	if err != nil {
		return Beat{}, err
	}
	if len(v) == 1 {
		return Beat{Tombstoned: true}, nil
	}
	if len(v) != 4 {
		return Beat{}, fmt.Errorf("store: takeover beat: unexpected reply %v", v)
	}
	had, _ := v[0].(int64)
	n, _ := v[1].(int64)
	b := Beat{Lost: had == 0, Turns: int(n)}
	stale, _ := v[2].([]any)
	for _, x := range stale {
		if id, ok := x.(string); ok {
			b.Stale = append(b.Stale, id)
		}
	}
	lost, _ := v[3].([]any)
	for _, x := range lost {
		if e, ok := x.(string); ok {
			if task, runner, ok := strings.Cut(e, "\n"); ok {
				b.Taken = append(b.Taken, Holder{TaskID: task, Runner: runner})
			}
		}
	}
	return b, nil
}

// Claim claims the dead worker instance for claimer: its turns (task id →
// entry), and ok false when it was not claimed (alive again, or claimed by
// another).
func (s *Takeover) Claim(ctx context.Context, instance, claimer string, after, tombstoneTTL time.Duration) (map[string]string, bool, error) {
	k := s.keys
	v, err := takeoverClaim.Run(ctx, s.rdb, []string{k.Takeover().Workers(), k.Takeover().Dead(instance), k.Takeover().Turns(instance), k.Takeover().Claimed(instance)},
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

// Registration is one runner's registration of a turn.
type Registration struct {
	Instance, TaskID, Runner string
	Entry                    []byte // its registry entry (JSON, package queue's)
	// HolderTTL bounds the turn's holder key (a runner that ends without
	// its unregistration leaves it that long); LostTTL the lost set's.
	HolderTTL, LostTTL time.Duration
	// After: a holder whose last beat is older is not alive (the takeover
	// delay; RegisterAll's test).
	After time.Duration
	// Number is the runner's number (StartReads.Runner; 0: none): a live
	// holder numbered higher keeps the turn, so that the runner that holds
	// it is the one whose journal saves write the record.
	Number int64
}

func (s *Takeover) registerArgs(r Registration, take bool) []any {
	t := 0
	if take {
		t = 1
	}
	return append(takeoverRegister.Args(4, 10), s.keys.Takeover().Turns(r.Instance), s.keys.Takeover().Holder(r.TaskID),
		s.keys.Takeover().Workers(), s.keys.Takeover().Number(r.TaskID), r.Instance, r.TaskID, r.Entry, r.Runner, t,
		r.HolderTTL.Milliseconds(), r.LostTTL.Milliseconds(), s.keys.Prefix, r.After.Milliseconds(), r.Number)
}

// Register registers r now (see RegisterOp).
func (s *Takeover) Register(ctx context.Context, r Registration) error {
	return takeoverRegister.Call(ctx, s.rdb, s.registerArgs(r, true)).Err()
}

// RegisterOp registers r as an op of a writer's round trip: r's runner
// holds the turn from then on, and a runner that held it before is told
// (its instance's next beat: Beat.Taken); unless a live holder numbered
// higher keeps it: held is told then, for r's runner to stop.
// ran is told once the op ran (written or not).
func (s *Takeover) RegisterOp(r Registration, ran, held func()) Op {
	return ScriptOp(takeoverRegister, s.registerArgs(r, true), func(c *redis.Cmd) error {
		ran()
		n, err := c.Int()
		if err == nil && n < 0 {
			held()
		}
		return err
	})
}

// UnregisterOp is Unregister as an op of a turn's last round trip; done is
// told when it was written.
func (s *Takeover) UnregisterOp(instance, taskID, runner string, done func()) Op {
	return ScriptOp(takeoverUnregister, s.unregisterArgs(instance, taskID, runner), func(c *redis.Cmd) error {
		err := c.Err()
		if err == nil {
			done()
		}
		return err
	})
}

func (s *Takeover) unregisterArgs(instance, taskID, runner string) []any {
	return append(takeoverUnregister.Args(3, 3), s.keys.Takeover().Turns(instance), s.keys.Takeover().Holder(taskID),
		s.keys.Takeover().Number(taskID), instance, taskID, runner)
}

// RegisterAll registers the turns again (the registry lost them, or their
// registration did not reach it), each unless another runner that is
// alive holds it now (any, as take is off): those are returned (held[i]: turns[i] was not
// registered), for their runners to stop.
func (s *Takeover) RegisterAll(ctx context.Context, turns []Registration) (held []bool, err error) {
	if len(turns) == 0 {
		return nil, nil
	}
	held = make([]bool, len(turns))
	ops := make([]Op, len(turns))
	for i, r := range turns {
		ops[i] = ScriptOp(takeoverRegister, s.registerArgs(r, false), func(c *redis.Cmd) error {
			n, err := c.Int()
			held[i] = err == nil && n <= 0
			return err
		})
	}
	for _, e := range Run(ctx, s.rdb, ops) {
		if e != nil {
			err = e
		}
	}
	return held, err
}

// Unregister notes that instance's runner no longer runs taskID.
func (s *Takeover) Unregister(ctx context.Context, instance, taskID, runner string) error {
	return takeoverUnregister.Call(ctx, s.rdb, s.unregisterArgs(instance, taskID, runner)).Err()
}

// LiveHolder returns the runner that holds the turn taskID when its
// instance is alive (beat within after, not tombstoned, the turn in its
// hash); ok false otherwise.
func (s *Takeover) LiveHolder(ctx context.Context, taskID string, after time.Duration) (h Holder, ok bool, err error) {
	v, err := takeoverLiveHolder.Run(ctx, s.rdb, []string{s.keys.Takeover().Holder(taskID), s.keys.Takeover().Workers()},
		taskID, after.Milliseconds(), s.keys.Prefix).Text()
	if errors.Is(err, redis.Nil) {
		return Holder{}, false, nil
	}
	if err != nil {
		return Holder{}, false, err
	}
	inst, runner, _ := strings.Cut(v, "\n")
	return Holder{TaskID: taskID, Instance: inst, Runner: runner}, true, nil
}

// Leave takes instance out of the registry (a graceful stop: its turns
// were put back through Asynq, and are not taken over).
func (s *Takeover) Leave(ctx context.Context, instance string) error {
	p := s.rdb.TxPipeline()
	p.ZRem(ctx, s.keys.Takeover().Workers(), instance)
	p.Del(ctx, s.keys.Takeover().Turns(instance))
	_, err := p.Exec(ctx)
	return err
}

// Tombstoned reports whether instance was claimed for dead.
func (s *Takeover) Tombstoned(ctx context.Context, instance string) (bool, error) {
	n, err := s.rdb.Exists(ctx, s.keys.Takeover().Dead(instance)).Result()
	return n > 0, err
}

// MarkTakenOver records runner as the newest runner of the turn taskID.
func (s *Takeover) MarkTakenOver(ctx context.Context, taskID, runner string, ttl time.Duration) error {
	return s.rdb.Set(ctx, s.keys.Takeover().Taken(taskID), runner, ttl).Err()
}

// TakenOverBy returns the runner of the turn's newest takeover, "" when
// it was never taken over.
func (s *Takeover) TakenOverBy(ctx context.Context, taskID string) (string, error) {
	v, err := s.rdb.Get(ctx, s.keys.Takeover().Taken(taskID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return v, err
}
