package ordering

import (
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// Every mutation is one Lua script, so that it is atomic on the server.
// All KEYS of one call share the hash tag {<key>}, so the scripts run on
// Redis Cluster too (the merged:… keys that TakeFollowers builds inside the
// script carry the same tag, so they live in the same slot). The one
// exception, extendManyLua, renews many conversations' locks at once and is
// used only on a single Redis (see renewer.extend).
//
// Scores: a member's score is max(nowMs*1000, highest score in the line + 1).
// It is strictly increasing within a line (the order), and floor(score/1000)
// is the member's join time in ms (used only for the dead-head grace).
// Scores stay below 2^53, so they are exact doubles; they are formatted with
// %.0f because Lua's default number formatting (%.14g) would round them.

// joinLua: KEYS[1]=line, KEYS[2]=done marker of task, KEYS[3]=merged
// marker of task; ARGV[1]=task, ARGV[2]=nowMs. Returns {position (0-based,
// -1 if the task is done or merged into another turn), added (1 when this
// call put the task in the line, 0 when it was there)}.
var joinLua = evalcmd.New(`
if redis.call('EXISTS', KEYS[2], KEYS[3]) > 0 then return {-1, 0} end
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not s then
  local sc = tonumber(ARGV[2]) * 1000
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) >= sc then sc = tonumber(top[2]) + 1 end
  redis.call('ZADD', KEYS[1], 'NX', string.format('%.0f', sc), ARGV[1])
  if not top[1] then return {0, 1} end
  return {redis.call('ZRANK', KEYS[1], ARGV[1]), 1}
end
return {redis.call('ZRANK', KEYS[1], ARGV[1]), 0}
`)

// acquireLua: KEYS[1]=line, KEYS[2]=lock, KEYS[3]=merged marker of task,
// KEYS[4]=done marker of task;
// ARGV[1]=task, ARGV[2]=token, ARGV[3]=holder, ARGV[4]=leaseMs,
// ARGV[5]=nowMs, ARGV[6]=autojoin ("1"/"0").
// The head takes a free lock; the task that holds the lock takes it again
// (a new token: the turn continued elsewhere) wherever it is in the line,
// since a task that joined in front of it (JoinFront) waits for it anyway.
// Returns one of:
//
//	{'merged', headTask}
//	{'done'}
//	{'notjoined'}
//	{'wait', position, head, lockTask (empty when free), headScore}
//	{'ok', previousToken (empty when the lock was free), joined ('1' when auto-joined)}
var acquireLua = evalcmd.New(`
local m = redis.call('MGET', KEYS[3], KEYS[4])
if m[1] then return {'merged', m[1]} end
if m[2] then return {'done'} end
local joined = '0'
if not redis.call('ZSCORE', KEYS[1], ARGV[1]) then
  if ARGV[6] ~= '1' then return {'notjoined'} end
  local sc = tonumber(ARGV[5]) * 1000
  local top = redis.call('ZRANGE', KEYS[1], -1, -1, 'WITHSCORES')
  if top[2] and tonumber(top[2]) >= sc then sc = tonumber(top[2]) + 1 end
  redis.call('ZADD', KEYS[1], 'NX', string.format('%.0f', sc), ARGV[1])
  joined = '1'
end
local h = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
local lock = redis.call('HMGET', KEYS[2], 'task', 'token')
local held = lock[1] or ''
if held ~= ARGV[1] then
  if h[1] ~= ARGV[1] then
    return {'wait', redis.call('ZRANK', KEYS[1], ARGV[1]), h[1], held, h[2]}
  end
  if held ~= '' then
    return {'wait', 0, h[1], held, h[2]}
  end
end
local prev = lock[2] or ''
redis.call('HSET', KEYS[2], 'task', ARGV[1], 'token', ARGV[2], 'holder', ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[4])
return {'ok', prev, joined}
`)

// removeDeadLua: KEYS[1]=line, KEYS[2]=lock; ARGV[1]=head. Removes head
// only if it is still the head and the lock is free. Returns 1 if removed.
var removeDeadLua = redis.NewScript(`
local h = redis.call('ZRANGE', KEYS[1], 0, 0)
if h[1] ~= ARGV[1] then return 0 end
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
return redis.call('ZREM', KEYS[1], ARGV[1])
`)

// leaveLua: KEYS[1]=line, KEYS[2]=lock; ARGV[1]=task. Removes task from
// the line; returns the new head when task was the head and the lock is
// free, else an empty string.
var leaveLua = redis.NewScript(`
local r = redis.call('ZRANK', KEYS[1], ARGV[1])
if not r then return '' end
redis.call('ZREM', KEYS[1], ARGV[1])
if r ~= 0 then return '' end
if redis.call('EXISTS', KEYS[2]) == 1 then return '' end
local h = redis.call('ZRANGE', KEYS[1], 0, 0)
return h[1] or ''
`)

// extendLua: KEYS[1]=lock; ARGV[1]=token, ARGV[2]=leaseMs. Returns 1 if
// extended (still ours), 0 otherwise.
var extendLua = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'token') == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
`)

// extendManyLua: KEYS = locks of different conversations; ARGV[1]=leaseMs,
// ARGV[1+i]=token of KEYS[i]. Extends each lock that still holds its token
// and returns, per key, 1 if extended (still ours), 0 otherwise. Its keys
// live in different slots: it runs on a single Redis only (renewer.extend
// uses extendLua per key elsewhere).
var extendManyLua = redis.NewScript(`
local out = {}
for i, k in ipairs(KEYS) do
  if redis.call('HGET', k, 'token') == ARGV[i + 1] then
    redis.call('PEXPIRE', k, ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`)

// releaseLua: KEYS[1]=line, KEYS[2]=lock, KEYS[3]=done marker of task,
// optional KEYS[4]=a key that must exist for the release to happen (the
// turn's final event's marker: ReleaseCmdAfter); ARGV[1]=task,
// ARGV[2]=token, ARGV[3]=done ("1"/"0"), ARGV[4]=done ttl ms. Returns {head
// (empty string when empty), held ('1' if the lock was still ours)}, or
// {"", "0", "missing"} when KEYS[4] does not exist (nothing was changed).
var releaseLua = evalcmd.New(`
if KEYS[4] and redis.call('EXISTS', KEYS[4]) == 0 then return {'', '0', 'missing'} end
local ours = '0'
if redis.call('HGET', KEYS[2], 'token') == ARGV[2] then
  redis.call('DEL', KEYS[2])
  ours = '1'
end
if ARGV[3] == '1' then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[4])
end
local h = redis.call('ZRANGE', KEYS[1], 0, 0)
return {h[1] or '', ours}
`)

// takeLua: KEYS[1]=line, KEYS[2]=group list of head, KEYS[3]=the head's
// last take; ARGV[1]=head, ARGV[2]=max, ARGV[3]=ttlMs, ARGV[4]=merged key
// prefix (ends with ':'), ARGV[5]=the call's token.
// Returns {'nothead', head} or {'ok', follower...}.
// A call sent again (its reply lost after it ran: go-redis retries) finds
// its token in the last take and returns what it took then, instead of
// taking nothing more (its followers, marked merged, would be lost).
var takeLua = redis.NewScript(`
local last = redis.call('GET', KEYS[3])
if last then
  local v = cjson.decode(last)
  if v[1] == ARGV[5] then return {'ok', unpack(v, 2)} end
end
local h = redis.call('ZRANGE', KEYS[1], 0, 0)
if h[1] ~= ARGV[1] then return {'nothead', h[1] or ''} end
local n = tonumber(ARGV[2])
if n <= 0 then return {'ok'} end
local f = redis.call('ZRANGE', KEYS[1], 1, n)
if #f == 0 then return {'ok'} end
for _, t in ipairs(f) do
  redis.call('ZREM', KEYS[1], t)
  redis.call('SET', ARGV[4] .. t, ARGV[1], 'PX', ARGV[3])
  redis.call('RPUSH', KEYS[2], t)
end
redis.call('PEXPIRE', KEYS[2], ARGV[3])
local taken = {ARGV[5]}
for _, t in ipairs(f) do taken[#taken + 1] = t end
redis.call('SET', KEYS[3], cjson.encode(taken), 'PX', ARGV[3])
return {'ok', unpack(f)}
`)
