package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
)

func rjRecord(taskID string, enqueued time.Time) *TurnRecord {
	return &TurnRecord{
		TaskID:       taskID,
		Otid:         "otid-" + taskID,
		AgentID:      "agent-1",
		Conversation: rjConv,
		MessageID:    "msg-" + taskID,
		Queue:        "default",
		EnqueuedAt:   enqueued,
	}
}

func TestJournalSaveGet(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		clock := newRJClock()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, Now: clock.Now})
		t0 := clock.Now()
		rec := &TurnRecord{
			TaskID: "task-1", Otid: "otid-1", AgentID: "agent-1", RunID: "run-1",
			Conversation: rjConv, MessageID: "m1", Queue: "critical",
			EnqueuedAt: t0, FirstStartedAt: t0.Add(250 * time.Millisecond), FinishedAt: t0.Add(9 * time.Second),
			Attempts: []Attempt{
				{N: 1, Worker: "w1", Start: t0.Add(250 * time.Millisecond), End: t0.Add(5 * time.Second),
					Phases:       []PhaseMark{{Phase: string(PhaseConnecting), At: t0.Add(250 * time.Millisecond)}, {Phase: string(PhaseStreaming), At: t0.Add(time.Second)}},
					TimeoutClock: TimeoutClockStall, SentOtid: true, Outcome: OutcomeRetrying, Error: "stream stalled"},
				{N: 2, Worker: "w2", Start: t0.Add(6 * time.Second), End: t0.Add(9 * time.Second),
					Phases: []PhaseMark{{Phase: string(PhaseRecovering), At: t0.Add(6 * time.Second)}}, Polls: 3, Resumes: 1,
					ResendDecision: ResendNotNeeded, Outcome: OutcomeAnswered},
			},
			Outcome: OutcomeAnswered, StopReason: "end_turn",
			TTFT:     2 * time.Second,
			Usage:    &Usage{PromptTokens: 10, CompletionTokens: 20, TotalTokens: 30, StepCount: 2},
			Tools:    []ToolSummary{{Name: "web_search", CallID: "c1", Duration: 1500 * time.Millisecond, Status: ToolStatusSuccess}},
			Warnings: []string{"tool_call_id c1 seen twice"},
			Merged:   []string{"m0"},
		}
		orig := *rec
		if err := j.Save(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(*rec, orig) {
			t.Fatal("Save modified its argument")
		}
		got, err := j.Get(ctx, "task-1")
		if err != nil {
			t.Fatal(err)
		}
		want := orig
		want.UpdatedAt = clock.Now()
		want.QueueWait = 250 * time.Millisecond // filled in
		want.Latency = 9 * time.Second          // filled in
		if !reflect.DeepEqual(got, &want) {
			t.Fatalf("Get:\n got %+v\nwant %+v", got, &want)
		}
		byOtid, err := j.ByOtid(ctx, "otid-1")
		if err != nil || !reflect.DeepEqual(byOtid, got) {
			t.Fatalf("ByOtid = %+v, %v", byOtid, err)
		}

		// Upsert: last write wins; explicit durations are kept.
		clock.Advance(time.Second)
		rec.Warnings = nil
		rec.QueueWait = time.Millisecond
		if err := j.Save(ctx, rec); err != nil {
			t.Fatal(err)
		}
		got, _ = j.Get(ctx, "task-1")
		if got.Warnings != nil || got.QueueWait != time.Millisecond || !got.UpdatedAt.Equal(clock.Now()) {
			t.Fatalf("after upsert: %+v", got)
		}

		for _, err := range []error{
			func() error { _, err := j.Get(ctx, "nope"); return err }(),
			func() error { _, err := j.ByOtid(ctx, "nope"); return err }(),
		} {
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
		}
		if err := j.Save(ctx, &TurnRecord{}); err == nil {
			t.Fatal("Save without task id succeeded")
		}
		if err := j.Save(ctx, nil); err == nil {
			t.Fatal("Save(nil) succeeded")
		}
	})
}

func TestJournalByOtidStale(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		rec := rjRecord("t1", time.Now())
		if err := j.Save(ctx, rec); err != nil {
			t.Fatal(err)
		}
		rec.Otid = "otid-new" // the otid changed (should not happen; never mislead)
		if err := j.Save(ctx, rec); err != nil {
			t.Fatal(err)
		}
		if _, err := j.ByOtid(ctx, "otid-t1"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ByOtid(old otid) = %v, want ErrNotFound", err)
		}
		if got, err := j.ByOtid(ctx, "otid-new"); err != nil || got.TaskID != "t1" {
			t.Fatalf("ByOtid(new otid) = %+v, %v", got, err)
		}
		// The record expired but the otid key did not (yet).
		if err := b.rdb.Del(ctx, b.prefix+"journal:turn:t1").Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := j.ByOtid(ctx, "otid-new"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("ByOtid(expired record) = %v, want ErrNotFound", err)
		}
	})
}

func rjIDs(recs []*TurnRecord) []string {
	ids := []string{}
	for _, r := range recs {
		ids = append(ids, r.TaskID)
	}
	return ids
}

func TestJournalRecentFilters(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }

		plain := rjRecord("plain", at(1))
		plain.Attempts = []Attempt{{N: 1, Outcome: OutcomeAnswered}}
		plain.Outcome = OutcomeAnswered

		stalled := rjRecord("stalled", at(2))
		stalled.Attempts = []Attempt{{N: 1, TimeoutClock: TimeoutClockConnect, Outcome: OutcomeFailed}}
		stalled.Outcome = OutcomeFailed

		retried := rjRecord("retried", at(3))
		retried.Attempts = []Attempt{{N: 1, Outcome: OutcomeRetrying}, {N: 2, Outcome: OutcomeAnswered}}
		retried.Outcome = OutcomeAnswered

		resent := rjRecord("resent", at(4))
		resent.Attempts = []Attempt{{N: 1, TimeoutClock: TimeoutClockTotal}, {N: 2, ResendDecision: ResendSent}}
		resent.Resends = 1
		resent.Outcome = OutcomeAnswered

		for _, r := range []*TurnRecord{resent, plain, retried, stalled} { // save order does not matter
			if err := j.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		want := map[Filter][]string{
			FilterAll:      {"resent", "retried", "stalled", "plain"},
			"":             {"resent", "retried", "stalled", "plain"},
			FilterStalls:   {"resent", "stalled"},
			FilterRetries:  {"resent", "retried"},
			FilterResends:  {"resent"},
			FilterFailures: {"stalled"},
		}
		for f, w := range want {
			got, err := j.Recent(ctx, f, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(rjIDs(got), w) {
				t.Errorf("Recent(%q) = %v, want %v", f, rjIDs(got), w)
			}
		}
		if got, _ := j.Recent(ctx, FilterAll, 2); !reflect.DeepEqual(rjIDs(got), []string{"resent", "retried"}) {
			t.Errorf("Recent(all, 2) = %v", rjIDs(got))
		}
		if _, err := j.Recent(ctx, "bogus", 1); err == nil {
			t.Error("Recent(bogus) succeeded")
		}

		// A later save that clears a flag takes the turn out of that index.
		stalled.Outcome = OutcomeAnswered
		if err := j.Save(ctx, stalled); err != nil {
			t.Fatal(err)
		}
		if got, _ := j.Recent(ctx, FilterFailures, 0); len(got) != 0 {
			t.Errorf("failures after the turn recovered = %v", rjIDs(got))
		}
		if n, _ := b.rdb.ZCard(ctx, b.prefix+"journal:idx:failures").Result(); n != 0 {
			t.Errorf("failures index still has %d members", n)
		}
	})
}

func TestParseFilter(t *testing.T) {
	for _, s := range []string{"", "all", "stalls", "retries", "resends", "failures"} {
		if _, err := ParseFilter(s); err != nil {
			t.Errorf("ParseFilter(%q): %v", s, err)
		}
	}
	if _, err := ParseFilter("stall"); err == nil {
		t.Error("ParseFilter(stall) succeeded")
	}
}

func TestJournalIndexTrimmed(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, MaxIndex: 3})
		base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 7 {
			r := rjRecord(fmt.Sprintf("t%d", i), base.Add(time.Duration(i)*time.Second))
			r.Attempts = []Attempt{{N: 1}, {N: 2}}
			if err := j.Save(ctx, r); err != nil {
				t.Fatal(err)
			}
		}
		for _, idx := range []string{"recent", "retries"} {
			if n, _ := b.rdb.ZCard(ctx, b.prefix+"journal:idx:"+idx).Result(); n != 3 {
				t.Errorf("index %s has %d members, want 3", idx, n)
			}
		}
		got, err := j.Recent(ctx, FilterAll, 10)
		if err != nil || !reflect.DeepEqual(rjIDs(got), []string{"t6", "t5", "t4"}) {
			t.Fatalf("Recent = %v, %v", rjIDs(got), err)
		}
		// Records outlive their index entries; Get still finds them.
		if _, err := j.Get(ctx, "t0"); err != nil {
			t.Fatalf("Get(t0): %v", err)
		}
	})
}

// A record without any time is indexed at its first save and keeps that
// place when saved again.
func TestJournalUntimedRecord(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		clock := newRJClock()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, Now: clock.Now})
		if err := j.Save(ctx, &TurnRecord{TaskID: "a"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := j.Save(ctx, &TurnRecord{TaskID: "b"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := j.Save(ctx, &TurnRecord{TaskID: "a", Outcome: OutcomeCancelled}); err != nil {
			t.Fatal(err)
		}
		got, err := j.Recent(ctx, FilterAll, 0)
		if err != nil || !reflect.DeepEqual(rjIDs(got), []string{"b", "a"}) {
			t.Fatalf("Recent = %v, %v", rjIDs(got), err)
		}
	})
}

func TestJournalRetention(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		const retention = time.Hour
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, Retention: retention})
		old := rjRecord("old", time.Now().Add(-time.Minute))
		if _, err := j.RecordIntent(ctx, "old", old.Otid, 1, "w1"); err != nil {
			t.Fatal(err)
		}
		if err := j.Save(ctx, old); err != nil {
			t.Fatal(err)
		}
		keys := []string{"journal:turn:old", "journal:intents:old", "journal:otid:otid-old", "journal:idx:recent"}
		for _, k := range keys {
			ttl, err := b.rdb.PTTL(ctx, b.prefix+k).Result()
			if err != nil || ttl <= retention-time.Minute || ttl > retention {
				t.Errorf("PTTL %s = %v, %v; want about %v", k, ttl, err, retention)
			}
		}

		// A record that expires while the index lives on (refreshed by a
		// later save) is skipped and removed from the index.
		fresh := rjRecord("fresh", time.Now())
		fresh.Outcome = OutcomeFailed
		if b.srv.Mini != nil {
			b.srv.Mini.FastForward(retention / 2)
			if err := j.Save(ctx, fresh); err != nil {
				t.Fatal(err)
			}
			b.srv.Mini.FastForward(retention/2 + time.Second)
		} else {
			// A real Redis cannot be fast-forwarded: expire the old record by hand.
			if err := j.Save(ctx, fresh); err != nil {
				t.Fatal(err)
			}
			if err := b.rdb.Del(ctx, b.prefix+"journal:turn:old").Err(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := j.Get(ctx, "old"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("Get(old) after retention = %v, want ErrNotFound", err)
		}
		got, err := j.Recent(ctx, FilterAll, 10)
		if err != nil || !reflect.DeepEqual(rjIDs(got), []string{"fresh"}) {
			t.Fatalf("Recent = %v, %v; want [fresh]", rjIDs(got), err)
		}
		members, _ := b.rdb.ZRange(ctx, b.prefix+"journal:idx:recent", 0, -1).Result()
		if !reflect.DeepEqual(members, []string{"fresh"}) {
			t.Fatalf("recent index = %v, want the expired entry removed", members)
		}
		if b.srv.Mini != nil {
			// Everything goes once nothing refreshes it.
			b.srv.Mini.FastForward(retention + time.Second)
			if got, err := j.Recent(ctx, FilterFailures, 10); err != nil || len(got) != 0 {
				t.Fatalf("Recent after full retention = %v, %v", rjIDs(got), err)
			}
			if n := len(b.srv.Mini.Keys()); n != 0 {
				t.Fatalf("keys left after retention: %v", b.srv.Mini.Keys())
			}
		}
	})
}

func TestJournalIntents(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		clock := newRJClock()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, Now: clock.Now})
		if got, err := j.Intents(ctx, "t"); err != nil || len(got) != 0 {
			t.Fatalf("Intents before any = %v, %v", got, err)
		}
		var all []Intent
		for n := 1; n <= 3; n++ {
			clock.Advance(time.Second)
			prior, err := j.RecordIntent(ctx, "t", "otid-t", n, fmt.Sprintf("w%d", n))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(prior, append([]Intent{}, all...)) {
				t.Fatalf("attempt %d: prior = %+v, want %+v", n, prior, all)
			}
			all = append(all, Intent{TaskID: "t", Otid: "otid-t", Attempt: n, Worker: fmt.Sprintf("w%d", n), At: clock.Now()})
		}
		got, err := j.Intents(ctx, "t")
		if err != nil || !reflect.DeepEqual(got, all) {
			t.Fatalf("Intents = %+v, %v; want %+v", got, err, all)
		}
		// Saving the record does not touch the intents.
		if err := j.Save(ctx, rjRecord("t", clock.Now())); err != nil {
			t.Fatal(err)
		}
		if got, _ := j.Intents(ctx, "t"); len(got) != 3 {
			t.Fatalf("intents after Save: %d", len(got))
		}
		if _, err := j.RecordIntent(ctx, "", "o", 1, "w"); err == nil {
			t.Fatal("RecordIntent without task id succeeded")
		}
		if _, err := j.RecordIntent(ctx, "t", "", 1, "w"); err == nil {
			t.Fatal("RecordIntent without otid succeeded")
		}
	})
}

// Racing attempts: no intent is lost, and each sees exactly the ones before
// it (so exactly one attempt sees none).
func TestJournalIntentsConcurrent(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		const n = 20
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			priors []int
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
				prior, err := j.RecordIntent(ctx, "t", "otid", i+1, "w")
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				priors = append(priors, len(prior))
				mu.Unlock()
			}()
		}
		wg.Wait()
		sort.Ints(priors)
		for i, p := range priors {
			if p != i {
				t.Fatalf("prior lengths %v, want 0..%d each once", priors, n-1)
			}
		}
		got, err := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix}).Intents(ctx, "t")
		if err != nil || len(got) != n {
			t.Fatalf("Intents = %d, %v; want %d", len(got), err, n)
		}
	})
}

func TestJournalSaveConcurrent(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		var wg sync.WaitGroup
		for i := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := rjRecord("t", time.Now())
				r.Attempts = make([]Attempt, 1+i%3)
				r.Error = fmt.Sprint(i)
				if err := j.Save(ctx, r); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		got, err := j.Get(ctx, "t")
		if err != nil {
			t.Fatal(err)
		}
		// Whichever write won, its index entries agree with it.
		retries, _ := j.Recent(ctx, FilterRetries, 0)
		if (len(got.Attempts) > 1) != (len(retries) == 1) {
			t.Fatalf("record has %d attempts but retries index has %v", len(got.Attempts), rjIDs(retries))
		}
	})
}

func TestLiveIntents(t *testing.T) {
	in := func(n int) Intent { return Intent{Attempt: n} }
	refused := func(n int) Intent { return Intent{Attempt: n, Refused: true} }
	cases := []struct {
		name string
		all  []Intent
		live []int // attempts of the live intents
	}{
		{"none", nil, nil},
		{"one live", []Intent{in(1)}, []int{1}},
		{"refused", []Intent{in(1), refused(1)}, nil},
		{"refused, then a live one", []Intent{in(1), refused(1), in(2)}, []int{2}},
		{"a refusal withdraws only its attempt's latest intent", []Intent{in(1), in(1), refused(1)}, []int{1}},
		{"a refusal of another attempt withdraws nothing", []Intent{in(1), refused(2)}, []int{1}},
		{"interleaved attempts", []Intent{in(1), in(2), refused(1)}, []int{2}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []int
			for _, l := range liveIntents(c.all) {
				if l.Refused {
					t.Fatalf("a refusal is live: %+v", l)
				}
				got = append(got, l.Attempt)
			}
			if !slices.Equal(got, c.live) {
				t.Fatalf("live attempts %v, want %v", got, c.live)
			}
		})
	}
}

// A turn's saves write each index entry and the otid key once: a later save of the same turn
// (or of a turn whose record the attempt read) writes only the record, adds the entries of the
// flags it gained, and removes only entries the record may have had; a save that did not run
// (a finished record kept) teaches nothing.
func TestJournalSavesSkipKnownIndexEntries(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		save := func(rec *TurnRecord, keepFinished bool, ix *journalIndexed) []any {
			t.Helper()
			_, args, err := saveKeysArgs(j, rec, keepFinished, ix)
			if err != nil {
				t.Fatal(err)
			}
			op, err := j.saveOp(rec, keepFinished, 0, ix)
			if err != nil {
				t.Fatal(err)
			}
			if errs := store.Run(ctx, b.rdb, []store.Op{op}); errs[0] != nil {
				t.Fatal(errs[0])
			}
			return args
		}
		// The index arguments: otid, then per journalSaveFilters "1" add, "0" remove, "-" leave.
		idx := func(args []any) string {
			s := fmt.Sprint(args[2] != "")
			for _, a := range args[9:] {
				s += " " + a.(string)
			}
			return s
		}
		in := func(f Filter, task string) bool {
			_, err := b.rdb.ZScore(ctx, j.indexKey(f), task).Result()
			return err == nil
		}
		start := time.Now().UTC()
		rec := &TurnRecord{TaskID: "t1", Otid: "o1", EnqueuedAt: start,
			Attempts: []Attempt{{N: 1, Start: start}}}

		var ix journalIndexed
		ix.init(&TurnRecord{}) // nothing read: no record yet
		if got := idx(save(rec, false, &ix)); got != "true 1 - - - -" {
			t.Errorf("first save: %q", got)
		}
		if got := idx(save(rec, false, &ix)); got != "false - - - - -" {
			t.Errorf("second save: %q, want only the record", got)
		}
		if byOtid, err := j.ByOtid(ctx, "o1"); err != nil || byOtid.TaskID != "t1" {
			t.Fatalf("by otid: %+v %v", byOtid, err)
		}
		if !in(FilterAll, "t1") || in(FilterRetries, "t1") {
			t.Fatal("index entries after the first attempt")
		}

		// The next attempt reads the record: its entries are known; it gains retries and stalls.
		read, err := j.Get(ctx, "t1")
		if err != nil {
			t.Fatal(err)
		}
		var ix2 journalIndexed
		ix2.init(read)
		read.Attempts = append(read.Attempts, Attempt{N: 2, Start: start, TimeoutClock: TimeoutClockStall})
		if got := idx(save(read, false, &ix2)); got != "false - 1 1 - -" {
			t.Errorf("retry's save: %q", got)
		}
		if !in(FilterStalls, "t1") || !in(FilterRetries, "t1") || in(FilterFailures, "t1") {
			t.Fatal("index entries after the retry")
		}
		// It fails: added to failures; a kept finished record teaches nothing.
		read.Outcome = OutcomeFailed
		if got := idx(save(read, false, &ix2)); got != "false - - - - 1" {
			t.Errorf("failed save: %q", got)
		}
		var ix3 journalIndexed
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
		if in(FilterFailures, "t1") {
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
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		now := time.Date(2026, 11, 26, 10, 0, 0, 0, time.UTC)
		opts := func(prefix string) JournalOptions {
			return JournalOptions{Prefix: prefix, Retention: time.Hour, MaxIndex: 3, Now: func() time.Time { return now }}
		}
		plain, script := NewJournal(b.rdb, opts(b.prefix+"plain:")), NewJournal(b.rdb, opts(b.prefix+"script:"))
		var ixPlain, ixScript *journalIndexed // the turn's, when it knows
		run := func(rec *TurnRecord, known bool) {
			t.Helper()
			var ixp, ixs *journalIndexed
			if known {
				ixp, ixs = ixPlain, ixScript
			}
			op, err := plain.saveOp(rec, false, 0, ixp)
			if err != nil {
				t.Fatal(err)
			}
			args, err := script.saveArgs(rec, false, 0, ixs)
			if err != nil {
				t.Fatal(err)
			}
			wrote := journalIndexedBits(rec)
			sop := store.ScriptOp(store.JournalSave, args, func(c *redis.Cmd) error {
				if n, err := c.Int64(); err != nil || n != 1 {
					return fmt.Errorf("script: %d %v", n, err)
				}
				if ixs != nil {
					ixs.sure.Or(wrote)
				}
				return nil
			})
			for i, err := range store.Run(ctx, b.rdb, []store.Op{op, sop}) {
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
		dump := func(j *Journal) string {
			t.Helper()
			keys, err := b.rdb.Keys(ctx, j.opts.Prefix+"*").Result()
			if err != nil {
				t.Fatal(err)
			}
			sort.Strings(keys)
			var out []string
			for _, k := range keys {
				var v any
				switch typ := b.rdb.Type(ctx, k).Val(); typ {
				case "string":
					v = b.rdb.Get(ctx, k).Val()
				case "zset":
					v = b.rdb.ZRangeWithScores(ctx, k, 0, -1).Val()
				case "list":
					v = b.rdb.LRange(ctx, k, 0, -1).Val()
				default:
					t.Fatalf("key %s: type %s", k, typ)
				}
				ttl := b.rdb.PTTL(ctx, k).Val()
				out = append(out, fmt.Sprintf("%s=%v expires:%v", strings.TrimPrefix(k, j.opts.Prefix), v, ttl > 0 && ttl <= time.Hour))
			}
			return strings.Join(out, "\n")
		}
		check := func(step string) {
			t.Helper()
			if p, s := dump(plain), dump(script); p != s {
				t.Fatalf("%s: plain save left\n%s\nthe script\n%s", step, p, s)
			}
		}
		for i := range 5 {
			task := fmt.Sprintf("t%d", i)
			for _, j := range []*Journal{plain, script} {
				if err := j.rdb.RPush(ctx, j.intentsKey(task), "{}").Err(); err != nil {
					t.Fatal(err)
				}
			}
			ixPlain, ixScript = new(journalIndexed), new(journalIndexed)
			ixPlain.init(nil)
			ixScript.init(nil)
			rec := rjRecord(task, now.Add(-time.Duration(5-i)*time.Minute))
			rec.Attempts = []Attempt{{N: 1, Start: now}}
			run(rec, i%2 == 0)
			check(task + " first save")
			rec.FirstStartedAt = now // the turn's time is known now: its entry moves
			rec.Attempts = append(rec.Attempts, Attempt{N: 2, Start: now, TimeoutClock: "stall"})
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
		if n := b.rdb.ZCard(ctx, plain.indexKey(FilterAll)).Val(); n != 3 {
			t.Fatalf("the recent index has %d entries, want MaxIndex (3)", n)
		}
	})
}

// A command of the save's transaction that fails (here the index is not a
// sorted set) fails the save, and the turn does not learn the index entries.
func TestPlainSaveReportsAFailedCommand(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		if err := b.rdb.Set(ctx, j.indexKey(FilterAll), "not a zset", 0).Err(); err != nil {
			t.Fatal(err)
		}
		var ix journalIndexed
		ix.init(nil)
		now := time.Now()
		rec := rjRecord("t", now)
		rec.FirstStartedAt = now
		op, err := j.saveOp(rec, false, 0, &ix)
		if err != nil {
			t.Fatal(err)
		}
		err = store.Run(ctx, b.rdb, []store.Op{op})[0]
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
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		save := func(runner int64, worker string) {
			t.Helper()
			rec := &TurnRecord{TaskID: "t1", Otid: "o1", Attempts: []Attempt{{N: 1, Worker: worker}}}
			op, err := j.saveOp(rec, false, runner, nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := store.Run(ctx, b.rdb, []store.Op{op})[0]; err != nil {
				t.Fatal(err)
			}
		}
		stored := func() string {
			t.Helper()
			rec, err := j.Get(ctx, "t1")
			if err != nil {
				t.Fatal(err)
			}
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

// A save that keeps finished records writes nothing over an answered one (an attempt that does
// not know whether its finish reached Redis journals its retry that way); it writes over the rest.
func TestSaveKeepsFinishedRecords(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		run := func(rec *TurnRecord) {
			op, err := j.saveOp(rec, true, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if errs := store.Run(ctx, b.rdb, []store.Op{op}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
		run(&TurnRecord{TaskID: "t", Otid: "o", Outcome: ""})
		run(&TurnRecord{TaskID: "t", Otid: "o", Outcome: "", Error: "second"})
		if rec, _ := j.Get(ctx, "t"); rec.Error != "second" {
			t.Fatalf("an unfinished record was kept: %+v", rec)
		}
		if err := j.Save(ctx, &TurnRecord{TaskID: "t", Otid: "o", Outcome: OutcomeAnswered}); err != nil {
			t.Fatal(err)
		}
		run(&TurnRecord{TaskID: "t", Otid: "o", Outcome: "", Error: "retrying"})
		if rec, _ := j.Get(ctx, "t"); rec.Outcome != OutcomeAnswered {
			t.Fatalf("the finished record was overwritten: %+v", rec)
		}
	})
}
