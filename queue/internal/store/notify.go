package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// NotifyOnce appends a notify entry to a reply stream unless the call's
// marker exists, and sets the marker, in one script: a notify sent again
// (its reply lost and go-redis retrying, or the caller retrying with the
// same key) is one entry.
// KEYS: stream, marker. ARGV: maxlen, ttl ms (the marker's), stream ttl ms
// (0: none; else the stream expires that long after the entry and loses
// its entries older than that, as ReplyEmitMany's), the text's sha256, the call's token, then the entry's
// field/value pairs.
// Returns the marker's value, "<entry id> <sha256> <token>": the entry
// written by this call or, when the marker was there, by the first.
var NotifyOnce = evalcmd.New(`
local m = redis.call('GET', KEYS[2])
if m then return m end
local id = redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', unpack(ARGV, 6))
local sttl = tonumber(ARGV[3])
if sttl > 0 then
  redis.call('PEXPIRE', KEYS[1], sttl)
  local ms = tonumber(string.match(id, '^(%d+)'))
  if ms > sttl then
    redis.pcall('XTRIM', KEYS[1], 'MINID', '~', string.format('%.0f', ms - sttl) .. '-0')
  end
end
m = id .. ' ' .. ARGV[4] .. ' ' .. ARGV[5]
local ttl = tonumber(ARGV[2])
if ttl > 0 then redis.call('SET', KEYS[2], m, 'PX', ttl) else redis.call('SET', KEYS[2], m) end
return m
`)

// Notified is what a notify's marker holds: the entry the first call with
// its key wrote, the sha256 of that call's text and that call's token.
type Notified struct {
	ID, Sum, Token string
}

// Notify writes a notify entry (fields: the flat field/value pairs of the
// entry) to stream once per marker (NotifyOnce), and returns the marker: a
// Token equal to token means this call wrote the entry (also when go-redis
// sent it again after a lost reply); another token, that an earlier call
// with the same marker did (Sum says whether with the same text).
func (r *Replies) Notify(ctx context.Context, stream, marker, sum, token string, fields ...any) (Notified, error) {
	args := append([]any{r.maxLenArg, r.ttlArg, r.streamTTLArg, sum, token}, fields...)
	v, err := NotifyOnce.Run(ctx, r.RDB, []string{stream, marker}, args...).Text()
	if err != nil {
		return Notified{}, err
	}
	parts := strings.Split(v, " ")
	if len(parts) != 3 {
		return Notified{}, fmt.Errorf("notify marker %q: unexpected value", marker)
	}
	return Notified{ID: parts[0], Sum: parts[1], Token: parts[2]}, nil
}
