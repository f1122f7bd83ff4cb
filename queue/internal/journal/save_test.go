package journal

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
	"github.com/lettaq/lettaq/queue/record"
)

// A turn's saves write each index entry and the otid key once: a later save of the same turn
// (or of a turn whose record the attempt read) writes only the record, adds the entries of the
// flags it gained, and removes only entries the record may have had; a save that did not run
// (a finished record kept) teaches nothing.
func TestJournalSavesSkipKnownIndexEntries(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		st, sv := testJournal(rdb, prefix, 0, 0, nil)
		save := func(rec *TurnRecord, keepFinished bool, ix *Indexed) []any {
			t.Helper()
			_, args, err := saveKeysArgs(sv, rec, keepFinished, ix)
			if err != nil {
				t.Fatal(err)
			}
			op, err := sv.SaveOp(rec, keepFinished, 0, ix)
			if err != nil {
				t.Fatal(err)
			}
			if errs := store.Run(ctx, rdb, []store.Op{op}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			return args
		}
		// The index arguments: otid, then per index "1" add, "0" remove, "-" leave
		// (the intents flag after them left out).
		idx := func(args []any) string {
			s := fmt.Sprint(args[2] != "")
			for _, a := range args[9 : len(args)-1] {
				s += " " + a.(string)
			}
			return s
		}
		in := func(f Index, task string) bool {
			_, err := rdb.ZScore(ctx, indexKey(st, f), task).Result()
			return err == nil
		}
		start := time.Now().UTC()
		rec := &TurnRecord{TaskID: "t1", Otid: "o1", EnqueuedAt: start,
			Attempts: []record.Attempt{{N: 1, Start: start}}}

		var ix Indexed
		ix.init(&TurnRecord{}) // nothing read: no record yet
		if got := idx(save(rec, false, &ix)); got != "true 1 - - - -" {
			t.Errorf("first save: %q", got)
		}
		if got := idx(save(rec, false, &ix)); got != "false - - - - -" {
			t.Errorf("second save: %q, want only the record", got)
		}
		if byOtid, err := st.OtidTask(ctx, "o1"); err != nil || byOtid != "t1" {
			t.Fatalf("by otid: %q %v", byOtid, err)
		}
		if !in(IndexRecent, "t1") || in(IndexRetries, "t1") {
			t.Fatal("index entries after the first attempt")
		}

		// The next attempt reads the record: its entries are known; it gains retries and stalls.
		read := storedRecord(t, st, "t1")
		var ix2 Indexed
		ix2.init(read)
		read.Attempts = append(read.Attempts, record.Attempt{N: 2, Start: start, TimeoutClock: TimeoutClockStall})
		if got := idx(save(read, false, &ix2)); got != "false - 1 1 - -" {
			t.Errorf("retry's save: %q", got)
		}
		if !in(IndexStalls, "t1") || !in(IndexRetries, "t1") || in(IndexFailures, "t1") {
			t.Fatal("index entries after the retry")
		}
		// It fails: added to failures; a kept finished record teaches nothing.
		read.Outcome = OutcomeFailed
		if got := idx(save(read, false, &ix2)); got != "false - - - - 1" {
			t.Errorf("failed save: %q", got)
		}
		var ix3 Indexed
		ix3.init(&TurnRecord{})
		save(&TurnRecord{TaskID: "t1", Otid: "o1", EnqueuedAt: start}, true, &ix3) // kept: not written
		if ix3.sure.Load() != 0 {
			t.Errorf("a save that did not run marked entries as written: %b", ix3.sure.Load())
		}
		// A record that loses a flag it may have had leaves that index.
		read.Outcome = OutcomeAnswered
		if got := idx(save(read, false, &ix2)); got != "false - - - - 0" {
			t.Errorf("save after the outcome changed: %q", got)
		}
		if in(IndexFailures, "t1") {
			t.Error("still in failures")
		}
		// Without a state (Save): every entry written or removed, as always.
		if got := idx(save(read, false, nil)); got != "true 1 1 1 0 0" {
			t.Errorf("save without a state: %q", got)
		}
	})
}

// A save without keepFinished is plain commands (store.Journal's plainSaveOp), not a call of
// store.JournalSave: from the same arguments both leave the same keys, values,
// expiries and index entries, through a series of saves that add, keep and
// remove index entries, with and without the turn's index knowledge, and with
// the index trimmed to its length.
func TestPlainSaveMatchesScript(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
		clock := func() time.Time { return now }
		plainSt, plain := testJournal(rdb, prefix+"plain:", time.Hour, 3, clock)
		scriptSt, script := testJournal(rdb, prefix+"script:", time.Hour, 3, clock)
		var ixPlain, ixScript *Indexed // the turn's, when it knows
		run := func(rec *TurnRecord, known bool) {
			t.Helper()
			var ixp, ixs *Indexed
			if known {
				ixp, ixs = ixPlain, ixScript
			}
			op, err := plain.SaveOp(rec, false, 0, ixp)
			if err != nil {
				t.Fatal(err)
			}
			args, err := script.saveArgs(rec, false, 0, ixs)
			if err != nil {
				t.Fatal(err)
			}
			wrote := indexedBits(rec)
			sop := store.ScriptOp(store.JournalSave, args, func(c *redis.Cmd) error {
				if n, err := c.Int64(); err != nil || n != 1 {
					return fmt.Errorf("script: %d %v", n, err)
				}
				if ixs != nil {
					ixs.sure.Or(wrote)
				}
				return nil
			})
			for i, err := range store.Run(ctx, rdb, []store.Op{op, sop}) {
				if err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			if ixp != nil && (ixp.sure.Load() != ixs.sure.Load() || ixp.maybe.Load() != ixs.maybe.Load()) {
				t.Fatalf("index knowledge: plain %b/%b, script %b/%b", ixp.sure.Load(), ixp.maybe.Load(), ixs.sure.Load(), ixs.maybe.Load())
			}
		}
		// dump is every key of a journal, its prefix cut, with its value
		// (index entries with their scores) and whether it expires within
		// the retention.
		dump := func(st *store.Journal) string {
			t.Helper()
			keys, err := rdb.Keys(ctx, st.Keys.Prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(keys)
			var out []string
			for _, k := range keys {
				var v any
				switch typ := rdb.Type(ctx, k).Val(); typ {
				case "string":
					v = rdb.Get(ctx, k).Val()
				case "zset":
					v = rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
				case "list":
					v = rdb.LRange(ctx, k, 0, -1).Val()
				default:
					t.Fatalf("key %s: type %s", k, typ)
				}
				ttl := rdb.PTTL(ctx, k).Val()
				out = append(out, fmt.Sprintf("%s=%v expires:%v", strings.TrimPrefix(k, st.Keys.Prefix), v, ttl > 0 && ttl <= time.Hour))
			}
			return strings.Join(out, "\n")
		}
		check := func(step string) {
			t.Helper()
			if p, s := dump(plainSt), dump(scriptSt); p != s {
				t.Fatalf("%s: plain save left\n%s\nthe script\n%s", step, p, s)
			}
		}
		for i := range 5 {
			task := fmt.Sprintf("t%d", i)
			for _, st := range []*store.Journal{plainSt, scriptSt} {
				if err := rdb.RPush(ctx, st.Keys.Journal().Intents(task), "{}").Err(); err != nil {
					t.Fatal(err)
				}
			}
			ixPlain, ixScript = new(Indexed), new(Indexed)
			ixPlain.init(nil)
			ixScript.init(nil)
			rec := rjRecord(task, now.Add(-time.Duration(5-i)*time.Minute))
			rec.Attempts = []record.Attempt{{N: 1, Start: now}}
			run(rec, i%2 == 0)
			check(task + " first save")
			rec.FirstStartedAt = now // the turn's time is known now: its entry moves
			rec.Attempts = append(rec.Attempts, record.Attempt{N: 2, Start: now, TimeoutClock: "stall"})
			run(rec, i%2 == 0)
			check(task + " retried")
			rec.Attempts = rec.Attempts[:1]
			rec.Outcome = OutcomeAnswered
			run(rec, i%2 == 0)
			check(task + " answered (leaves the retries and stalls indexes)")
			rec.Usage = &Usage{TotalTokens: 7} // the record alone (the turn knows its entries)
			run(rec, i%2 == 0)
			check(task + " saved again")
		}
		if n := rdb.ZCard(ctx, indexKey(plainSt, IndexRecent)).Val(); n != 3 {
			t.Fatalf("the recent index has %d entries, want MaxIndex (3)", n)
		}
	})
}

// A command of the save's transaction that fails (here the index is not a
// sorted set) fails the save, and the turn does not learn the index entries.
func TestPlainSaveReportsAFailedCommand(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		st, sv := testJournal(rdb, prefix, 0, 0, nil)
		if err := rdb.Set(ctx, indexKey(st, IndexRecent), "not a zset", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var ix Indexed
		ix.init(nil)
		now := time.Now()
		rec := rjRecord("t", now)
		rec.FirstStartedAt = now
		op, err := sv.SaveOp(rec, false, 0, &ix)
		if err != nil {
			t.Fatal(err)
		}
		err = store.Run(ctx, rdb, []store.Op{op})[0]
		if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
			t.Fatalf("save: %v, want the index's WRONGTYPE", err)
		}
		if ix.sure.Load() != 0 {
			t.Fatalf("the turn learned index entries %b from a failed save", ix.sure.Load())
		}
	})
}

// A save carrying its runner's number writes nothing over a record that a
// runner numbered higher saved; the same save sent again (a retry) writes
// again, and a save without a number (not a runner's) always writes.
func TestJournalSaveNumberedRunner(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		st, sv := testJournal(rdb, prefix, 0, 0, nil)
		save := func(runner int64, worker string) {
			t.Helper()
			rec := &TurnRecord{TaskID: "t1", Otid: "o1", Attempts: []record.Attempt{{N: 1, Worker: worker}}}
			op, err := sv.SaveOp(rec, false, runner, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Run(ctx, rdb, []store.Op{op})[0]; err != nil {
				t.Fatal(err)
			}
		}
		stored := func() string {
			t.Helper()
			rec := storedRecord(t, st, "t1")
			return rec.Attempts[0].Worker
		}
		for _, step := range []struct {
			runner       int64
			worker, want string
		}{
			{2, "second", "second"},
			{1, "first", "second"},                // started earlier: writes nothing
			{2, "second, later", "second, later"}, // the same runner again (or a retry)
			{3, "third", "third"},
			{2, "second", "third"},
			{0, "cancel", "cancel"}, // not a runner's save
			{2, "second", "cancel"}, // the numbers stay
		} {
			save(step.runner, step.worker)
			if got := stored(); got != step.want {
				t.Fatalf("after runner %d's save the record is %q's, want %q's", step.runner, got, step.want)
			}
		}
	})
}

// A save gives every key it writes an expiry, and only those: after any save no key of the
// journal is left without one (a crash between two saves leaves nothing unbounded). The runners
// hash gets its expiry when a runner first saves, not on the same runner's later saves; the
// intents get theirs refreshed only when the record may have any (an attempt journaled its
// intent, or it has more than one attempt), not by a first attempt's saves before its intent.
func TestJournalSaveExpiries(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		st, sv := testJournal(rdb, prefix, time.Hour, 0, nil)
		save := func(rec *TurnRecord, runner int64) {
			t.Helper()
			op, err := sv.SaveOp(rec, false, runner, nil)
			if err != nil {
				t.Fatal(err)
			}
			if errs := store.Run(ctx, rdb, []store.Op{op}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			keys, err := rdb.Keys(ctx, prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if ttl := rdb.PTTL(ctx, k).Val(); ttl <= 0 {
					t.Fatalf("after a save, %s has no expiry (%v)", k, ttl)
				}
			}
		}
		short := time.Minute // an expiry the save would have refreshed to the hour
		shorten := func(key string) {
			t.Helper()
			if err := rdb.PExpire(ctx, key, short).Err(); err != nil {
				t.Fatal(err)
			}
		}
		refreshed := func(key string) bool {
			t.Helper()
			ttl := rdb.PTTL(ctx, key).Val()
			if ttl <= 0 {
				t.Fatalf("%s: no expiry (%v)", key, ttl)
			}
			return ttl > short
		}
		runners, intents := st.Keys.Journal().Runners("t1"), st.Keys.Journal().Intents("t1")
		rec := rjRecord("t1", time.Now())
		rec.Attempts = []record.Attempt{{N: 1, Start: time.Now()}}

		save(rec, 1) // the runner's first save: its number and the hash's expiry
		if got := rdb.HGet(ctx, runners, "saved").Val(); got != "1" || !refreshed(runners) {
			t.Fatalf("first save: saved %q, runners refreshed %v", got, refreshed(runners))
		}
		shorten(runners)
		save(rec, 1)
		if refreshed(runners) {
			t.Fatal("the same runner's second save wrote the runners hash again")
		}
		save(rec, 2) // a new runner's first save
		if got := rdb.HGet(ctx, runners, "saved").Val(); got != "2" || !refreshed(runners) {
			t.Fatalf("second runner: saved %q, runners refreshed %v", got, refreshed(runners))
		}

		// The first attempt's intent, pushed after its saves (IntentPush gives its expiry).
		if err := rdb.RPush(ctx, intents, "{}").Err(); err != nil {
			t.Fatal(err)
		}
		shorten(intents)
		save(rec, 2) // SentOtid not set yet: nothing to refresh, as far as the record knows
		if refreshed(intents) {
			t.Fatal("a save of a first attempt before its intent refreshed the intents")
		}
		rec.Attempts[0].SentOtid = true
		save(rec, 2)
		if !refreshed(intents) {
			t.Fatal("a save after the intent left the intents' expiry behind the record's")
		}
		shorten(intents)
		rec.Attempts[0].SentOtid = false
		rec.Attempts = append(rec.Attempts, record.Attempt{N: 2, Start: time.Now()})
		save(rec, 3)
		if !refreshed(intents) {
			t.Fatal("a later attempt's save left the intents' expiry behind the record's")
		}
		// The plain save (no runner) follows the same flag.
		shorten(intents)
		rec.Attempts = rec.Attempts[:1]
		save(rec, 0)
		if refreshed(intents) {
			t.Fatal("a plain save of a first attempt before its intent refreshed the intents")
		}
		rec.Attempts[0].SentOtid = true
		save(rec, 0)
		if !refreshed(intents) {
			t.Fatal("a plain save after the intent left the intents' expiry behind")
		}
	})
}
