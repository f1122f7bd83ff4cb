package journal

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
	"github.com/lettaq/lettaq/queue/record"
)

// An attempt's copy of its record has attempts of its own; Mark notes a
// phase in the attempt's own entry; Ended says whether that entry ended.
func TestAttemptCopyAndEnded(t *testing.T) {
	_, sv := testJournal(nil, "lettaq:", 0, 0, nil)
	a := NewAttempt(sv)
	if a.Ended() {
		t.Fatal("ended without a record")
	}
	rec := rjRecord("t1", time.Now())
	rec.Attempts = []record.Attempt{{N: 1, End: time.Now(), Outcome: "retrying"}, {N: 2}}
	a.Begin(rec)
	if a.Index() != 1 || a.Current().N != 2 || a.Rec() != rec {
		t.Fatalf("after Begin: index %d, current %+v", a.Index(), a.Current())
	}
	if a.Ended() {
		t.Fatal("ended before its entry has an end (the earlier attempt's end is not its own)")
	}
	c := a.Copy()
	c.Attempts[1].Outcome = "changed in the copy"
	if a.Current().Outcome != "" {
		t.Fatal("the copy shares its attempts with the record")
	}
	a.Mark("streaming")
	if ph := a.Current().Phases; len(ph) != 1 || ph[0].Phase != "streaming" || ph[0].At.IsZero() {
		t.Fatalf("phases after Mark: %+v", ph)
	}
	if got := a.Latency(rec.EnqueuedAt.Add(time.Second)); got != time.Second {
		t.Fatalf("latency %v, want from the enqueue", got)
	}
	a.Lock()
	a.Current().End = time.Now()
	a.Unlock()
	if !a.Ended() {
		t.Fatal("not ended once its entry has an end")
	}
	// A record set as it was read (an earlier attempt finished the turn)
	// leaves the index at the first entry.
	b := NewAttempt(sv)
	b.SetRecord(rec)
	if b.Index() != 0 || !b.Ended() {
		t.Fatalf("SetRecord: index %d, ended %v", b.Index(), b.Ended())
	}
}

// An attempt's saves carry its runner's number, and what it learns of its
// record's index entries: once a save wrote the otid key, its later saves
// leave that key alone; keepFinished writes nothing over a finished record.
func TestAttemptSaves(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		rdb, prefix := b.RDB, b.Prefix
		ctx := context.Background()
		st, sv := testJournal(rdb, prefix, 0, 0, nil)
		run := func(a *Attempt, keepFinished bool) {
			t.Helper()
			op, err := a.SaveOp(keepFinished)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Run(ctx, rdb, []store.Op{op})[0]; err != nil {
				t.Fatal(err)
			}
		}
		newer := NewAttempt(sv)
		newer.SetRunner(2)
		newer.Read(nil) // no record yet
		rec := rjRecord("t1", time.Now())
		rec.Attempts = []record.Attempt{{N: 1, Worker: "newer"}}
		newer.Begin(rec)
		run(newer, false)
		if task, err := st.OtidTask(ctx, rec.Otid); err != nil || task != "t1" {
			t.Fatalf("otid key after the first save: %q %v", task, err)
		}
		if err := rdb.Del(ctx, st.Keys.Journal().Otid(rec.Otid)).Err(); err != nil {
			t.Fatal(err)
		}
		run(newer, false)
		if n := rdb.Exists(ctx, st.Keys.Journal().Otid(rec.Otid)).Val(); n != 0 {
			t.Fatal("a later save wrote the otid key the first one wrote")
		}

		// A runner numbered lower writes nothing over the newer runner's record.
		older := NewAttempt(sv)
		older.SetRunner(1)
		stale := *rec
		stale.Attempts = []record.Attempt{{N: 1, Worker: "older"}}
		older.Begin(&stale)
		run(older, false)
		if w := storedRecord(t, st, "t1").Attempts[0].Worker; w != "newer" {
			t.Fatalf("the record is %q's after the older runner's save", w)
		}

		// Finished: a save that keeps a finished record writes nothing.
		newer.Lock()
		newer.Rec().Outcome = OutcomeAnswered
		newer.Unlock()
		run(newer, false)
		newer.Lock()
		newer.Rec().Outcome, newer.Current().Outcome = "", "retrying"
		newer.Unlock()
		run(newer, true)
		if got := storedRecord(t, st, "t1"); got.Outcome != OutcomeAnswered || got.Attempts[0].Outcome != "" {
			t.Fatalf("a keepFinished save wrote over the finished record: %+v", got)
		}
	})
}
