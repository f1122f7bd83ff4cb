package store

import (
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// The Lua scripts of lettaq's stores, each documented with its keys and
// arguments (the functions named in their comments that build the
// arguments are package queue's stores).

// ReplyEmit increments the turn's seq and appends the event in one
// step, so that stream order and seq order agree across workers. With a
// third key (the answered marker) it writes nothing when the marker exists,
// and sets it otherwise.
//
// KEYS: stream, seq[, answered]
// ARGV: maxlen, ttl_ms, stream_ttl_ms, then 5 field/value pairs written
// before "seq", then the 2 pairs written after it (queue's Replies.emit passes them to Replies.Emit).
var ReplyEmit = redis.NewScript(`
local once = #KEYS == 3
if once and redis.call('EXISTS', KEYS[3]) == 1 then
  return {0, '', 0}
end
local seq = redis.call('INCR', KEYS[2])
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('PEXPIRE', KEYS[2], ttl) end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*',
  ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12], ARGV[13],
  'seq', tostring(seq), ARGV[14], ARGV[15], ARGV[16], ARGV[17])
local sttl = tonumber(ARGV[3])
if sttl > 0 then redis.call('PEXPIRE', KEYS[1], sttl) end
if once then
  if ttl > 0 then
    redis.call('SET', KEYS[3], id, 'PX', ttl)
  else
    redis.call('SET', KEYS[3], id)
  end
end
return {1, id, seq}
`)

// ReplyEmitMany is ReplyEmit for several events (of any turns
// and conversations) in one call, in order. The seq key's expiry is set
// when the counter is created; a stream's expiry is set once per call.
// Each event's fields go to XADD directly, not through a table and unpack:
// with the expiry set once, an instant turn's 7 events cost Redis 0.85 of
// the time they did that way (BenchmarkEmitScript: ~37 against ~44 µs).
//
// KEYS: per event: stream, seq[, answered or accepted marker]
// ARGV: maxlen, ttl_ms, stream_ttl_ms, then per event: "1" when it has a
// marker (written once) else "0", then its 14 field/value strings (the 5
// pairs before "seq", then the 2 after).
// Returns per event: written (1, or 0 when its marker was there), entry id,
// seq; or -1, the error, 0 when its own commands failed (a stream or seq key
// of the wrong type): an event's error is its own (redis.pcall), the other
// events of the call are written all the same (issue 24), and a failed event
// takes no seq.
var ReplyEmitMany = redis.NewScript(evalcmd.Register(`
local maxlen = ARGV[1]
local ttl = tonumber(ARGV[2])
local sttl = tonumber(ARGV[3])
local out = {}
local expiring = {}
local k, a = 1, 4
while a <= #ARGV do
  local stream, seqk = KEYS[k], KEYS[k + 1]
  local marker = nil
  if ARGV[a] == '1' then marker = KEYS[k + 2]; k = k + 3 else k = k + 2 end
  if marker and redis.call('EXISTS', marker) == 1 then
    out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = 0
  else
    local id
    local seq = redis.pcall('INCR', seqk)
    if type(seq) == 'table' then
      id = seq -- the error
    else
      if ttl > 0 and seq == 1 then redis.call('PEXPIRE', seqk, ttl) end
      id = redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*',
        ARGV[a + 1], ARGV[a + 2], ARGV[a + 3], ARGV[a + 4], ARGV[a + 5],
        ARGV[a + 6], ARGV[a + 7], ARGV[a + 8], ARGV[a + 9], ARGV[a + 10],
        'seq', tostring(seq), ARGV[a + 11], ARGV[a + 12], ARGV[a + 13], ARGV[a + 14])
      if type(id) == 'table' then redis.call('DECR', seqk) end
    end
    if type(id) == 'table' then
      out[#out + 1] = -1; out[#out + 1] = id.err; out[#out + 1] = 0
    else
      if sttl > 0 and not expiring[stream] then
        redis.call('PEXPIRE', stream, sttl)
        expiring[stream] = true
      end
      if marker then
        if ttl > 0 then redis.call('SET', marker, id, 'PX', ttl) else redis.call('SET', marker, id) end
      end
      out[#out + 1] = 1; out[#out + 1] = id; out[#out + 1] = seq
    end
  end
  a = a + 15
end
return out
`))

// JournalSave writes a record, its otid key and its index entries,
// and refreshes the retention of the record's keys, in one command. Only a
// save with keep finished runs it (it reads the record first); the others
// run the same writes as plain commands (plainSaveOp).
// KEYS: record, otid, intents, then the index keys. ARGV: record JSON, task
// id, otid ("" for none), ttl ms, score, known ("1": ZADD, else ZADD NX:
// keep the time of the first save), keep (index length), keep finished
// ("1": write nothing over a record whose outcome is final), then one flag
// per index key ("1": the record belongs in it, else it leaves it).
// Returns 1, or 0 when a finished record was kept.
var JournalSave = evalcmd.New(`
if ARGV[8] == '1' then
  local cur = redis.call('GET', KEYS[1])
  if cur then
    local ok, r = pcall(cjson.decode, cur)
    if ok and type(r) == 'table' and (r.outcome == 'answered' or r.outcome == 'failed' or r.outcome == 'approval_required') then
      return 0
    end
  end
end
local ttl = ARGV[4]
redis.call('SET', KEYS[1], ARGV[1], 'PX', ttl)
if ARGV[3] ~= '' then redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl) end
redis.call('PEXPIRE', KEYS[3], ttl)
local keep = tonumber(ARGV[7])
for i = 4, #KEYS do
  if ARGV[i + 5] == '1' then
    local added
    if ARGV[6] == '1' then
      added = redis.call('ZADD', KEYS[i], ARGV[5], ARGV[2])
    else
      added = redis.call('ZADD', KEYS[i], 'NX', ARGV[5], ARGV[2])
    end
    if added > 0 then redis.call('ZREMRANGEBYRANK', KEYS[i], 0, -keep - 1) end
    redis.call('PEXPIRE', KEYS[i], ttl)
  elseif ARGV[i + 5] == '0' then
    redis.call('ZREM', KEYS[i], ARGV[2])
  end
end
return 1
`)

// WriteResult is Asynq's ResultWriter.Write (HSET of the task hash's
// "result") for a task that still exists.
var WriteResult = evalcmd.New(`
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'result', ARGV[1])
return 1
`)

// ClearPending: KEYS[1]=pending key; ARGV[1]=request task id. Deletes
// the key only while it names that request.
var ClearPending = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0`)

// Unlock deletes the lock only when it still holds our token.
var Unlock = redis.NewScript(`if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) end return 0`)
