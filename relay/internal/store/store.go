// Package store keeps the relay's delivery state in Redis: every key and
// script the relay uses is here, so that what survives a crash is described in
// one place (docs/relay.md, "State").
//
// Per chat, one hash <prefix>relay:chat:<integration>:<chat_id>:
//
//	cursor          the last reply-stream entry whose effects are on the platform
//	o:<task_id>     an open turn: the stream entry id of its first event (replayed
//	                from there after a crash, to rebuild the growing answer)
//	m:<task_id>:<slot>  the platform's id of that turn's message in slot (part
//	                number, or "a" for the approval request); written right after
//	                the platform accepted the message, before anything else
//
// The hash expires TTL after its last write. Writes that carry a Fence fail
// with ErrLeaseLost when the lease it names is no longer held with its token
// (the chat's shard was taken over: see shards.go).
package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// ErrLeaseLost is returned by a fenced write whose lease another replica holds.
var ErrLeaseLost = errors.New("relay: chat lease lost")

// Store reads and writes the relay's keys.
type Store struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
	layout shard.Layout // the workers' shards (zero: one): where the reply streams are
}

// New returns a Store under prefix (default "lettaq:"); ttl is how long a
// chat's state outlives its last write (default 7 days).
func New(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Store {
	if prefix == "" {
		prefix = "lettaq:"
	}
	if ttl <= 0 {
		ttl = 7 * 24 * time.Hour
	}
	return &Store{rdb: rdb, prefix: prefix, ttl: ttl}
}

// WithShards sets the workers' layout, under which the reply streams are
// (each in its chat's shard's prefix: see queue.RepliesOptions.Shards); the
// relay's own keys stay under its prefix.
func (s *Store) WithShards(l shard.Layout) *Store {
	s.layout = l
	return s
}

// ChatKey is the chat's state hash.
func (s *Store) ChatKey(c record.Conversation) string {
	return s.prefix + "relay:chat:" + c.Integration + ":" + c.ChatID
}

// Fence names a lease and the token its holder got; the zero Fence fences
// nothing.
type Fence struct {
	Key, Token string
}

// PressKey maps a button's short key to its approval request.
func (s *Store) PressKey(short string) string { return s.prefix + "relay:press:" + short }

// RepliesPattern matches every reply stream (docs/reply-events.md), in
// every shard: with N shards their prefixes differ only inside their hash
// tag ("lettaq:{lettaq-3-17}:replies:…").
func (s *Store) RepliesPattern() string {
	if s.layout.N() <= 1 {
		return globEscape(s.prefix+"replies:") + "*"
	}
	p := s.layout.Prefix(0)
	return globEscape(p[:strings.IndexByte(p, '{')]) + "{*}:replies:*"
}

// repliesPrefix is the prefix of the reply streams of the shard key names.
func (s *Store) repliesPrefix(key string) string {
	if s.layout.N() <= 1 {
		return s.prefix + "replies:"
	}
	i, ok := s.layout.OfTask(key) // (a key's first hash tag names its shard, as a task id's does)
	if !ok {
		return ""
	}
	return s.layout.Prefix(i) + "replies:"
}

// globEscape escapes the characters of a Redis MATCH pattern.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		switch r {
		case '*', '?', '[', ']', '\\', '^', '-':
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// ChatOfStream names the chat of a reply stream key, or false when key is not
// one.
func (s *Store) ChatOfStream(key string) (record.Conversation, bool) {
	pre := s.repliesPrefix(key)
	rest, ok := strings.CutPrefix(key, pre)
	if !ok || pre == "" {
		return record.Conversation{}, false
	}
	integ, chat, ok := strings.Cut(rest, ":")
	if !ok || integ == "" {
		return record.Conversation{}, false
	}
	return record.Conversation{Integration: integ, ChatID: chat}, true
}

// State is a chat's durable delivery state.
type State struct {
	Cursor string                       // "" when nothing was applied yet
	Open   map[string]string            // task id → its first entry id
	Msgs   map[string]map[string]string // task id → slot → platform message id
}

// Load reads the chat's state.
func (s *Store) Load(ctx context.Context, c record.Conversation) (State, error) {
	h, err := s.rdb.HGetAll(ctx, s.ChatKey(c)).Result()
	st := State{Open: map[string]string{}, Msgs: map[string]map[string]string{}}
	if err != nil {
		return st, err
	}
	for f, v := range h {
		switch {
		case f == "cursor":
			st.Cursor = v
		case strings.HasPrefix(f, "o:"):
			st.Open[f[2:]] = v
		case strings.HasPrefix(f, "m:"):
			rest := f[2:]
			i := strings.LastIndexByte(rest, ':')
			if i < 0 {
				continue
			}
			task, slot := rest[:i], rest[i+1:]
			if st.Msgs[task] == nil {
				st.Msgs[task] = map[string]string{}
			}
			st.Msgs[task][slot] = v
		}
	}
	return st, nil
}

// Cursors returns the cursor of each chat ("" when none), in one round trip.
func (s *Store) Cursors(ctx context.Context, cs []record.Conversation) ([]string, error) {
	p := s.rdb.Pipeline()
	cmds := make([]*redis.StringCmd, len(cs))
	for i, c := range cs {
		cmds[i] = p.HGet(ctx, s.ChatKey(c), "cursor")
	}
	_, _ = p.Exec(ctx)
	out := make([]string, len(cs))
	for i, cmd := range cmds {
		v, err := cmd.Result()
		switch {
		case err == redis.Nil:
		case err != nil:
			return nil, err
		default:
			out[i] = v
		}
	}
	return out, nil
}

// fence is the Lua prologue that refuses a write when KEYS[2] does not hold
// ARGV[1] ("" writes unfenced).
const fence = `
if ARGV[1] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[1] then
  return redis.error_reply('LEASELOST')
end
`

var saveMsgScript = redis.NewScript(fence + `
redis.call('HSET', KEYS[1], ARGV[3], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// SaveMsg stores the platform id of task's message in slot. The relay calls
// it right after the platform accepted the message: until it returns, a crash
// leaves a message the relay does not know (docs/relay.md, "The window").
func (s *Store) SaveMsg(ctx context.Context, c record.Conversation, f Fence, task, slot, id string) error {
	err := saveMsgScript.Run(ctx, s.rdb, []string{s.ChatKey(c), f.key(s)},
		f.Token, s.ttl.Milliseconds(), "m:"+task+":"+slot, id).Err()
	return leaseErr(err)
}

var advanceScript = redis.NewScript(fence + `
local key = KEYS[1]
redis.call('HSET', key, 'cursor', ARGV[3])
local n = tonumber(ARGV[4])
local i = 5
for _ = 1, n do
  redis.call('HSETNX', key, 'o:' .. ARGV[i], ARGV[i+1])
  i = i + 2
end
local done = {}
while i <= #ARGV do
  done[ARGV[i]] = true
  redis.call('HDEL', key, 'o:' .. ARGV[i])
  i = i + 1
end
if next(done) ~= nil then
  for _, f in ipairs(redis.call('HKEYS', key)) do
    if string.sub(f, 1, 2) == 'm:' then
      local rest = string.sub(f, 3)
      local task = string.match(rest, '^(.*):[^:]*$')
      if task and done[task] then redis.call('HDEL', key, f) end
    end
  end
end
redis.call('PEXPIRE', key, ARGV[2])
return 1
`)

// Advance moves the cursor to entry, records the turns opened since (task id
// → first entry id; an open turn keeps its first id) and forgets the finished
// ones (their open mark and message ids), in one script: after it, no crash can
// make the relay show those turns again.
func (s *Store) Advance(ctx context.Context, c record.Conversation, f Fence, entry string, opened map[string]string, finished []string) error {
	args := []any{f.Token, s.ttl.Milliseconds(), entry, len(opened)}
	for t, from := range opened {
		args = append(args, t, from)
	}
	for _, t := range finished {
		args = append(args, t)
	}
	err := advanceScript.Run(ctx, s.rdb, []string{s.ChatKey(c), f.key(s)}, args...).Err()
	return leaseErr(err)
}

// SavePress maps a button's short key to the approval request it answers.
func (s *Store) SavePress(ctx context.Context, short, value string, ttl time.Duration) error {
	return s.rdb.Set(ctx, s.PressKey(short), value, ttl).Err()
}

// Press returns what SavePress stored, or redis.Nil.
func (s *Store) Press(ctx context.Context, short string) (string, error) {
	return s.rdb.Get(ctx, s.PressKey(short)).Result()
}

func leaseErr(err error) error {
	if err != nil && strings.Contains(err.Error(), "LEASELOST") {
		return ErrLeaseLost
	}
	return err
}

// key is the fence's lease key, or one that is never written when unfenced
// (a script names its keys even when it does not read them).
func (f Fence) key(s *Store) string {
	if f.Key == "" {
		return s.prefix + "relay:nofence"
	}
	return f.Key
}
