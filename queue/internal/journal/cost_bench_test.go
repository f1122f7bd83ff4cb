package journal

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// BenchmarkJournalSaveRedisCost measures what Redis spends on a turn's first
// journal save (the record, its otid key, its entry in the recent index):
// as plain commands in a MULTI … EXEC (store.Journal's plainSaveOp, what a save without
// a runner's number sends on one Redis), as a call of store.JournalSave with the same
// arguments (what it sends on a Cluster), and as the save of a numbered runner
// (a running turn's: the script, which compares the number and writes it). Each op is one round
// trip; it reports Redis's main-thread CPU per save, redis-cpu-µs/save (INFO
// cpu: meaningful on a Redis nothing else uses meanwhile; miniredis reports
// none). On a Redis 7.0 of its own, 2-CPU VM: 25–26 against 36–38 µs (the
// round trip's own reading and writing included).
//
//	go test -run '^$' -bench JournalSaveRedisCost ./queue/internal/journal/
func BenchmarkJournalSaveRedisCost(b *testing.B) {
	ctx := context.Background()
	rdb := testredis.New(b).Client(b)
	prefix := testkit.Prefix(b, rdb)
	_, sv := testJournal(rdb, prefix, 0, 0, nil)
	rec := benchTurnRecord()
	for _, v := range []struct {
		name string
		op   func(rec *TurnRecord) (store.Op, error)
	}{
		{"transaction", func(rec *TurnRecord) (store.Op, error) { return sv.SaveOp(rec, false, 0, nil) }},
		{"script", func(rec *TurnRecord) (store.Op, error) {
			args, err := sv.saveArgs(rec, false, 0, nil)
			if err != nil {
				return nil, err
			}
			return store.ScriptOp(store.JournalSave, args, func(c *redis.Cmd) error { return c.Err() }), nil
		}},
		{"numbered", func(rec *TurnRecord) (store.Op, error) { return sv.SaveOp(rec, false, 1, nil) }},
	} {
		b.Run(v.name, func(b *testing.B) {
			r := *rec
			save := func(i int) {
				r.TaskID, r.Otid = fmt.Sprintf("turn:%s-%d", v.name, i), fmt.Sprintf("otid-%s-%d", v.name, i)
				op, err := v.op(&r)
				if err != nil {
					b.Fatal(err)
				}
				if err := store.Run(ctx, rdb, []store.Op{op})[0]; err != nil {
					b.Fatal(err)
				}
			}
			save(-1) // loads the script
			cpu0 := testredis.MainCPU(ctx, rdb)
			b.ResetTimer()
			for i := range b.N {
				save(i)
			}
			b.StopTimer()
			if cpu1 := testredis.MainCPU(ctx, rdb); cpu1 > cpu0 {
				b.ReportMetric((cpu1-cpu0)*1e6/float64(b.N), "redis-cpu-µs/save")
			}
		})
	}
}
