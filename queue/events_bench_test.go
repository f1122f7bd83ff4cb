package queue

import (
	"context"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/record"

	"strconv"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// emitManyTableUnpack is store.ReplyEmitMany as it was before 2026-11-26
// (each event's XADD arguments built in a table and unpacked, the
// stream's expiry set per event; without the write key, which it skips):
// BenchmarkEmitScript's baseline.
var emitManyTableUnpack = redis.NewScript(`
local maxlen = ARGV[1]
local ttl = tonumber(ARGV[2])
local sttl = tonumber(ARGV[3])
local out = {}
local k, a = 1, 4
while a <= #ARGV do
  local once = ARGV[a] == '1'
  local stream, seqk = KEYS[k], KEYS[k + 1]
  local marker = nil
  if once then marker = KEYS[k + 3]; k = k + 4 else k = k + 3 end
  if once and redis.call('EXISTS', marker) == 1 then
    out[#out + 1] = 0; out[#out + 1] = ''; out[#out + 1] = 0
  else
    local seq = redis.call('INCR', seqk)
    if ttl > 0 and seq == 1 then redis.call('PEXPIRE', seqk, ttl) end
    local args = {stream, 'MAXLEN', '~', maxlen, '*'}
    for i = a + 4, a + 13 do args[#args + 1] = ARGV[i] end
    args[#args + 1] = 'seq'
    args[#args + 1] = tostring(seq)
    for i = a + 14, a + 17 do args[#args + 1] = ARGV[i] end
    local id = redis.call('XADD', unpack(args))
    if sttl > 0 then redis.call('PEXPIRE', stream, sttl) end
    if once then
      if ttl > 0 then redis.call('SET', marker, id, 'PX', ttl) else redis.call('SET', marker, id) end
    end
    out[#out + 1] = 1; out[#out + 1] = id; out[#out + 1] = seq
  end
  a = a + 18
end
return out
`)

// BenchmarkEmitScript measures what Redis spends running the reply events
// of one instant turn: each op is one call of store.ReplyEmitMany with the
// 7 events of one turn in one stream (connecting, streaming, thinking, a
// narration delta, streaming, the answer delta, the answer), and the same
// call of its earlier form (table-unpack) as the baseline. It reports
// Redis's own time per call, redis-µs/call, from INFO commandstats (the
// script's usec over its calls), and Redis's main-thread CPU per op, round
// trip included, redis-cpu-µs/op (INFO cpu); both meaningful on a Redis
// nothing else uses at the time (miniredis reports none). A third variant,
// plain-commands, sends each event's INCR and XADD as commands in one
// pipeline: not a way to write events (its XADD cannot carry the INCR's
// value, so the seq field is a constant), only what the same writes cost
// Redis without a script.
func BenchmarkEmitScript(b *testing.B) {
	ctx := context.Background()
	rdb, prefix := benchRedis(b)
	r := NewReplies(rdb, RepliesOptions{Prefix: prefix, MaxLen: 1000})
	c := record.Conversation{Integration: "bench", ChatID: "emit"}
	task, otid, run := "turn:bench:"+uuid.NewString(), uuid.NewString(), "run-"+uuid.NewString()
	evs := []record.ReplyEvent{
		{Type: record.EventPhase, Phase: "connecting"},
		{Type: record.EventPhase, Phase: record.PhaseStreaming},
		{Type: record.EventPhase, Phase: "thinking"},
		{Type: record.EventAnswerDelta, Text: "The user wrote to me. I will answer.", Narration: true},
		{Type: record.EventPhase, Phase: record.PhaseStreaming},
		{Type: record.EventAnswerDelta, Text: "ok"},
		{Type: record.EventAnswer, Text: "ok", StopReason: "end_turn"},
	}
	prepared := make([]*progress.Event, len(evs))
	for i, ev := range evs {
		ev.TaskID, ev.Otid, ev.RunID = task, otid, run
		pe, err := r.prepareMany(c, ev, "")
		if err != nil {
			b.Fatal(err)
		}
		prepared[i] = pe
	}
	op := r.emitManyOp(prepared, nil)
	keys, args := store.EmitManyArgs(r.st, prepared)
	for _, v := range []struct {
		name string
		emit func() error
	}{
		{"direct", func() error {
			if errs := store.Run(ctx, rdb, []store.Op{op}); len(errs) > 0 {
				return errs[0]
			}
			return nil
		}},
		{"table-unpack", func() error { return emitManyTableUnpack.Run(ctx, rdb, keys, args...).Err() }},
		{"plain-commands", func() error {
			p := rdb.Pipeline()
			for _, pe := range prepared {
				k := appendHead(pe).Keys()
				p.Incr(ctx, k[1].(string))
				xa := []any{"xadd", k[0], "maxlen", "~", r.st.MaxLenArg(), "*"}
				xa = append(xa, appendArgs(pe, nil)[4:]...) // the fields (not the once flag and the write key)
				p.Do(ctx, append(xa, "seq", "0")...)
			}
			_, err := p.Exec(ctx)
			return err
		}},
	} {
		b.Run(v.name, func(b *testing.B) {
			if err := v.emit(); err != nil { // loads the script
				b.Fatal(err)
			}
			calls0, us0 := evalshaStats(ctx, rdb)
			cpu0 := testredis.MainCPU(ctx, rdb)
			b.ResetTimer()
			for range b.N {
				if err := v.emit(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if calls1, us1 := evalshaStats(ctx, rdb); calls1 > calls0 {
				b.ReportMetric(float64(us1-us0)/float64(calls1-calls0), "redis-µs/call")
			}
			if cpu1 := testredis.MainCPU(ctx, rdb); cpu1 > cpu0 {
				b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/op")
			}
		})
	}
}

// benchRedis is a benchmark's Redis (testredis.New) and a key prefix of
// its own, whose keys are deleted when the benchmark ends.
func benchRedis(b *testing.B) (redis.UniversalClient, string) {
	rdb := testredis.New(b).Client(b)
	prefix := "lettaqbench:" + uuid.NewString() + ":"
	b.Cleanup(func() {
		ctx := context.Background()
		it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			rdb.Del(ctx, it.Val())
		}
	})
	return rdb, prefix
}

// evalshaStats reads EVALSHA's calls and usec from INFO commandstats (0, 0
// when the server does not report them).
func evalshaStats(ctx context.Context, rdb redis.UniversalClient) (calls, usec int64) {
	info, err := rdb.Info(ctx, "commandstats").Result()
	if err != nil {
		return 0, 0
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_evalsha:")
		if !ok {
			continue
		}
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				calls = n
			case "usec":
				usec = n
			}
		}
	}
	return calls, usec
}
