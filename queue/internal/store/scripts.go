package store

import (
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// The Lua scripts of lettaq's stores, each documented with its keys and
// arguments (the functions named in their comments that build the
// arguments are package queue's stores).

// ReplyEmitMany appends events (of any turns and conversations) to their
// streams in one call, in order, each with the next seq of its turn's
// counter, so that stream order and seq order agree across workers. The seq
// key's expiry is set when the counter is created; a stream's retention is
// applied once per call: with stream_ttl_ms > 0 the stream expires that long
// after its last event (PEXPIRE) and loses its entries older than that
// (XTRIM MINID ~ the written entry's ms − stream_ttl_ms: whole macro nodes,
// so an entry may outlive it by up to a node's 100 entries), besides the
// MAXLEN ~ cap of every XADD (one XADD takes one strategy). The trim is a
// pcall: on a Redis before 6.2 (no MINID) it does nothing, and the events
// are written all the same. Each event's fields go to XADD directly, not through a
// table and unpack: with the expiry set once, an instant turn's 7 events
// cost Redis 0.85 of the time they did that way (BenchmarkEmitScript: ~37
// against ~44 µs).
//
// Written once per write key: an event names its writer (a token: the
// attempt's, or one Replies.Emit call's) and its number n in the writer's
// events, increasing in the order the writer sends them. The emitted hash of
// the turn keeps, per writer, the last event it wrote (n, entry id, seq): an
// event whose n is not above it was written by this very call sent before
// (its reply lost, go-redis sent it again) and is not written again; it
// returns as written, with its entry id and seq when it is that last event
// (else an empty id and 0). The call reads a writer's entry once and
// writes it once, after its last event (the script runs whole: nothing
// reads the hash in between), so that a turn's events that share a call
// (its last answer deltas and its answer) cost one HGET and one HSET.
//
// seq never goes back below floor, the highest seq the writer was told for
// the turn: after Redis lost its last writes (a crash with appendfsync
// everysec, a failover to a lagging replica) the counter may be behind what
// a consumer showed, and the next event then takes floor + 1.
//
// With a marker key (answered or accepted) an event is written only when
// the marker does not exist, and sets it to the entry id.
//
// KEYS: per event: stream, seq, emitted[, answered or accepted marker]
// ARGV: maxlen, ttl_ms, stream_ttl_ms (0: the stream neither expires nor is
// trimmed by age), then per event: "1" when it has a
// marker (written once) else "0", its writer token ("" for none), n, floor,
// then its 14 field/value strings (the 5 pairs before "seq", then the 2
// after).
// Returns per event: written (1, or 0 when its marker was there), entry id,
// seq; or -1, the error, 0 when its own commands failed (a stream or seq key
// of the wrong type): an event's error is its own (redis.pcall), the other
// events of the call are written all the same, and a failed event
// takes no seq.
var ReplyEmitMany = redis.NewScript(evalcmd.Register(`
local maxlen = ARGV[1]
local ttl = tonumber(ARGV[2])
local sttl = tonumber(ARGV[3])
local out = {}
local expiring = {}
-- per emitted key and writer: its last event {n, id, seq} (false: none),
-- as read from the hash or written by this call; wrote: those to write back
local last, wrote = {}, {}
local k, a = 1, 4
while a <= #ARGV do
  local stream, seqk, wk = KEYS[k], KEYS[k + 1], KEYS[k + 2]
  local marker = nil
  if ARGV[a] == '1' then marker = KEYS[k + 3]; k = k + 4 else k = k + 3 end
  local tok, n = ARGV[a + 1], tonumber(ARGV[a + 2])
  local lk = wk .. '\n' .. tok
  local done = false
  if tok ~= '' then
    local l = last[lk]
    if l == nil then
      l = false
      local v = redis.pcall('HGET', wk, tok)
      if type(v) == 'string' then
        local ln, lid, lseq = string.match(v, '^(%d+) (%S*) (%d+)$')
        if ln then l = {ln, lid, lseq} end
      end
      last[lk] = l
    end
    if l and tonumber(l[1]) >= n then
      done = true
      out[#out + 1] = 1
      if tonumber(l[1]) == n then
        out[#out + 1] = l[2]; out[#out + 1] = tonumber(l[3])
      else
        out[#out + 1] = ''; out[#out + 1] = 0
      end
    end
  end
  if done then
    -- written by this call before
  elseif marker and redis.call('EXISTS', marker) == 1 then
    out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = 0
  else
    local id
    local seq = redis.pcall('INCR', seqk)
    if type(seq) == 'table' then
      id = seq -- the error
    else
      if ttl > 0 and seq == 1 then redis.call('PEXPIRE', seqk, ttl) end
      local floor = tonumber(ARGV[a + 3])
      local bumped = seq <= floor
      if bumped then seq = redis.call('INCRBY', seqk, floor + 1 - seq) end
      id = redis.pcall('XADD', stream, 'MAXLEN', '~', maxlen, '*',
        ARGV[a + 4], ARGV[a + 5], ARGV[a + 6], ARGV[a + 7], ARGV[a + 8],
        ARGV[a + 9], ARGV[a + 10], ARGV[a + 11], ARGV[a + 12], ARGV[a + 13],
        'seq', tostring(seq), ARGV[a + 14], ARGV[a + 15], ARGV[a + 16], ARGV[a + 17])
      if type(id) == 'table' and not bumped then redis.call('DECR', seqk) end
    end
    if type(id) == 'table' then
      out[#out + 1] = -1; out[#out + 1] = id.err; out[#out + 1] = 0
    else
      if sttl > 0 and not expiring[stream] then
        redis.call('PEXPIRE', stream, sttl)
        local ms = tonumber(string.match(id, '^(%d+)'))
        if ms > sttl then
          redis.pcall('XTRIM', stream, 'MINID', '~', string.format('%.0f', ms - sttl) .. '-0')
        end
        expiring[stream] = true
      end
      if marker then
        if ttl > 0 then redis.call('SET', marker, id, 'PX', ttl) else redis.call('SET', marker, id) end
      end
      if tok ~= '' then
        if not wrote[lk] then wrote[#wrote + 1] = {wk, tok, lk}; wrote[lk] = true end
        last[lk] = {ARGV[a + 2], id, tostring(seq)}
      end
      out[#out + 1] = 1; out[#out + 1] = id; out[#out + 1] = seq
    end
  end
  a = a + 18
end
for _, w in ipairs(wrote) do
  local l = last[w[3]]
  local added = redis.pcall('HSET', w[1], w[2], l[1] .. ' ' .. l[2] .. ' ' .. l[3])
  if added == 1 and ttl > 0 then redis.call('PEXPIRE', w[1], ttl) end
end
return out
`))

// JournalSave writes a record, its otid key and its index entries,
// and refreshes the retention of the record's keys, in one command. A save
// with keep finished or a runner's number runs it (it reads first); the
// others run the same writes as plain commands (plainSaveOp).
//
// Each key gets its expiry when the save writes it, and only then, so
// that no key it writes is ever left without one: the record and the otid
// key with their SET; an index entry's key with its ZADD; the runners hash
// when the save writes its runner's number, which is on the runner's
// first save (its later saves find their number there and write nothing
// to it: it then lives Retention from that save, the attempt's start);
// the intents when the caller says the record may have any (an attempt
// that journaled an intent, or more than one attempt: IntentPush gives a
// new list its expiry, and a first attempt's saves before its intent have
// nothing to refresh).
//
// An index entry it adds trims its index: to the newest keep members, and
// of the members whose turn time is more than the retention before the
// added one's (their records are gone, or soon: a save refreshes a
// record's retention, not its turn time). The plain save (plainSaveOp)
// trims by rank only; the index expires when no save added to it for the
// retention, and a query drops the members whose record expired.
//
// KEYS: record, otid, intents, runners, then the index keys. ARGV: record
// JSON, task id, otid ("" for none), ttl ms, score, known ("1": ZADD, else
// ZADD NX: keep the time of the first save), keep (index length), keep
// finished ("1": write nothing over a record whose outcome is final), the
// runner's number ("0": none; else nothing is written when a runner with a
// higher number saved the record: one runner of a turn at a time, the
// newest), then one flag per index key ("1": the record belongs in it,
// else it leaves it), then the intents flag ("1": refresh the intents'
// expiry).
// Returns 1, 0 when a finished record was kept, -1 when a newer runner's
// record was.
var JournalSave = evalcmd.New(`
local n = tonumber(ARGV[9])
local saved = 0
if n > 0 then saved = tonumber(redis.call('HGET', KEYS[4], 'saved') or '0') end
if n > 0 and n < saved then return -1 end
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
if ARGV[#ARGV] == '1' then redis.call('PEXPIRE', KEYS[3], ttl) end
if n > saved then
  redis.call('HSET', KEYS[4], 'saved', n)
  redis.call('PEXPIRE', KEYS[4], ttl)
end
local keep = tonumber(ARGV[7])
for i = 5, #KEYS do
  if ARGV[i + 5] == '1' then
    local added
    if ARGV[6] == '1' then
      added = redis.call('ZADD', KEYS[i], ARGV[5], ARGV[2])
    else
      added = redis.call('ZADD', KEYS[i], 'NX', ARGV[5], ARGV[2])
    end
    if added > 0 then
      redis.call('ZREMRANGEBYRANK', KEYS[i], 0, -keep - 1)
      redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', '(' .. string.format('%.0f', tonumber(ARGV[5]) - tonumber(ttl)))
    end
    redis.call('PEXPIRE', KEYS[i], ttl)
  elseif ARGV[i + 5] == '0' then
    redis.call('ZREM', KEYS[i], ARGV[2])
  end
end
return 1
`)

// IntentPush appends an intent (or a refusal) to a task's list of intents
// unless the list already holds it, and returns the intents ahead of it.
// An intent's JSON is unique (its attempt, worker and the nanosecond it was
// made): finding it means this very push ran before (its reply lost,
// go-redis sent it again), so it is not appended twice, nor read as another
// attempt's.
//
// The push that makes the list gives it its retention, in the same script:
// the list never exists without one. A later push (another attempt's
// intent, a refusal) leaves it as it is: the record's saves refresh it from
// then on (an attempt that pushed has SentOtid, a second attempt is one
// more: see JournalSave's intents flag).
// KEYS: intents. ARGV: intent, ttl ms.
var IntentPush = evalcmd.New(`
local pos = redis.call('LPOS', KEYS[1], ARGV[1])
if not pos then
  pos = redis.call('RPUSH', KEYS[1], ARGV[1]) - 1
  if pos == 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
end
if pos == 0 then return {} end
return redis.call('LRANGE', KEYS[1], 0, pos - 1)
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
