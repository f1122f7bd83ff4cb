package queue

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

func rjRecord(taskID string, enqueued time.Time) *record.TurnRecord {
	return &record.TurnRecord{
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
		rec := &record.TurnRecord{
			TaskID: "task-1", Otid: "otid-1", AgentID: "agent-1", RunID: "run-1",
			Conversation: rjConv, MessageID: "m1", Queue: "critical",
			EnqueuedAt: t0, FirstStartedAt: t0.Add(250 * time.Millisecond), FinishedAt: t0.Add(9 * time.Second),
			Attempts: []record.Attempt{
				{N: 1, Worker: "w1", Start: t0.Add(250 * time.Millisecond), End: t0.Add(5 * time.Second),
					Phases:       []record.PhaseMark{{Phase: string(record.PhaseConnecting), At: t0.Add(250 * time.Millisecond)}, {Phase: string(record.PhaseStreaming), At: t0.Add(time.Second)}},
					TimeoutClock: record.TimeoutClockStall, SentOtid: true, Outcome: record.OutcomeRetrying, Error: "stream stalled"},
				{N: 2, Worker: "w2", Start: t0.Add(6 * time.Second), End: t0.Add(9 * time.Second),
					Phases: []record.PhaseMark{{Phase: string(record.PhaseRecovering), At: t0.Add(6 * time.Second)}}, Polls: 3, Resumes: 1,
					ResendDecision: record.ResendNotNeeded, Outcome: record.OutcomeAnswered},
			},
			Outcome: record.OutcomeAnswered, StopReason: "end_turn",
			TTFT:     2 * time.Second,
			Usage:    &record.Usage{PromptTokens: 10, CompletionTokens: 20, TotalTokens: 30, StepCount: 2},
			Tools:    []record.ToolSummary{{Name: "web_search", CallID: "c1", Duration: 1500 * time.Millisecond, Status: record.ToolStatusSuccess}},
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
		if err := j.Save(ctx, &record.TurnRecord{}); err == nil {
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

func rjIDs(recs []*record.TurnRecord) []string {
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
		plain.Attempts = []record.Attempt{{N: 1, Outcome: record.OutcomeAnswered}}
		plain.Outcome = record.OutcomeAnswered

		stalled := rjRecord("stalled", at(2))
		stalled.Attempts = []record.Attempt{{N: 1, TimeoutClock: record.TimeoutClockConnect, Outcome: record.OutcomeFailed}}
		stalled.Outcome = record.OutcomeFailed

		retried := rjRecord("retried", at(3))
		retried.Attempts = []record.Attempt{{N: 1, Outcome: record.OutcomeRetrying}, {N: 2, Outcome: record.OutcomeAnswered}}
		retried.Outcome = record.OutcomeAnswered

		resent := rjRecord("resent", at(4))
		resent.Attempts = []record.Attempt{{N: 1, TimeoutClock: record.TimeoutClockTotal}, {N: 2, ResendDecision: record.ResendSent}}
		resent.Resends = 1
		resent.Outcome = record.OutcomeAnswered

		for _, r := range []*record.TurnRecord{resent, plain, retried, stalled} { // save order does not matter
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
		stalled.Outcome = record.OutcomeAnswered
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

func TestFilterUnmarshalText(t *testing.T) {
	for _, s := range []string{"", "all", "stalls", "retries", "resends", "failures"} {
		if err := new(Filter).UnmarshalText([]byte(s)); err != nil {
			t.Errorf("UnmarshalText(%q): %v", s, err)
		}
	}
	if err := new(Filter).UnmarshalText([]byte("stall")); err == nil {
		t.Error("UnmarshalText(stall) succeeded")
	}
}

func TestJournalIndexTrimmed(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix, MaxIndex: 3})
		base := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		for i := range 7 {
			r := rjRecord(fmt.Sprintf("t%d", i), base.Add(time.Duration(i)*time.Second))
			r.Attempts = []record.Attempt{{N: 1}, {N: 2}}
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
		if err := j.Save(ctx, &record.TurnRecord{TaskID: "a"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := j.Save(ctx, &record.TurnRecord{TaskID: "b"}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Minute)
		if err := j.Save(ctx, &record.TurnRecord{TaskID: "a", Outcome: record.OutcomeCancelled}); err != nil {
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
		fresh.Outcome = record.OutcomeFailed
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
		var all []record.Intent
		for n := 1; n <= 3; n++ {
			clock.Advance(time.Second)
			prior, err := j.RecordIntent(ctx, "t", "otid-t", n, fmt.Sprintf("w%d", n))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(prior, append([]record.Intent{}, all...)) {
				t.Fatalf("attempt %d: prior = %+v, want %+v", n, prior, all)
			}
			all = append(all, record.Intent{TaskID: "t", Otid: "otid-t", Attempt: n, Worker: fmt.Sprintf("w%d", n), At: clock.Now()})
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
				r.Attempts = make([]record.Attempt, 1+i%3)
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
	in := func(n int) record.Intent { return record.Intent{Attempt: n} }
	refused := func(n int) record.Intent { return record.Intent{Attempt: n, Refused: true} }
	cases := []struct {
		name string
		all  []record.Intent
		live []int // attempts of the live intents
	}{
		{"none", nil, nil},
		{"one live", []record.Intent{in(1)}, []int{1}},
		{"refused", []record.Intent{in(1), refused(1)}, nil},
		{"refused, then a live one", []record.Intent{in(1), refused(1), in(2)}, []int{2}},
		{"a refusal withdraws only its attempt's latest intent", []record.Intent{in(1), in(1), refused(1)}, []int{1}},
		{"a refusal of another attempt withdraws nothing", []record.Intent{in(1), refused(2)}, []int{1}},
		{"interleaved attempts", []record.Intent{in(1), in(2), refused(1)}, []int{2}},
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

// benchTurnRecord is an instant turn's final record.
func benchTurnRecord() *record.TurnRecord {
	t0 := time.Date(2026, 11, 26, 8, 42, 30, 123456789, time.UTC)
	return &record.TurnRecord{
		TaskID: "01JDXQ7Z8K3M4N5P6Q7R8S9T0V", Otid: "otid-01JDXQ7Z8K3M4N5P6Q7R8S9T0V", AgentID: "agent-3f1c2b7e-8d4a-4f2e-9c1d-5b6a7e8f9a0b",
		RunID: "run-7c9e6679-7425-40de-944b-e07fc1f90ae7", Conversation: record.Conversation{Integration: "telegram", ChatID: "123456789"},
		MessageID: "msg-42", Queue: "default", ThreadMode: "agent",
		EnqueuedAt: t0, FirstStartedAt: t0.Add(1500 * time.Microsecond), FinishedAt: t0.Add(9 * time.Millisecond), UpdatedAt: t0.Add(9 * time.Millisecond),
		QueueWait: 1500 * time.Microsecond,
		Attempts: []record.Attempt{{N: 1, Worker: "bench-host-1234", Start: t0.Add(1500 * time.Microsecond), End: t0.Add(9 * time.Millisecond),
			Phases:         []record.PhaseMark{{Phase: "connecting", At: t0.Add(2 * time.Millisecond)}, {Phase: "streaming", At: t0.Add(4 * time.Millisecond)}},
			ResendDecision: record.ResendNotNeeded, SentOtid: true, Outcome: record.OutcomeAnswered}},
		Outcome: record.OutcomeAnswered, StopReason: "end_turn", Latency: 9 * time.Millisecond, TTFT: 5 * time.Millisecond,
		Usage: &record.Usage{PromptTokens: 1200, CompletionTokens: 34, TotalTokens: 1234, StepCount: 1},
	}
}

// A save that keeps finished records writes nothing over an answered one (an attempt that does
// not know whether its finish reached Redis journals its retry that way); it writes over the rest.
func TestSaveKeepsFinishedRecords(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		run := func(rec *record.TurnRecord) {
			op, err := j.saver.SaveOp(rec, true, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			if errs := store.Run(ctx, b.rdb, []store.Op{op}); errs[0] != nil {
				t.Fatal(errs[0])
			}
		}
		run(&record.TurnRecord{TaskID: "t", Otid: "o", Outcome: ""})
		run(&record.TurnRecord{TaskID: "t", Otid: "o", Outcome: "", Error: "second"})
		if rec, _ := j.Get(ctx, "t"); rec.Error != "second" {
			t.Fatalf("an unfinished record was kept: %+v", rec)
		}
		if err := j.Save(ctx, &record.TurnRecord{TaskID: "t", Otid: "o", Outcome: record.OutcomeAnswered}); err != nil {
			t.Fatal(err)
		}
		run(&record.TurnRecord{TaskID: "t", Otid: "o", Outcome: "", Error: "retrying"})
		if rec, _ := j.Get(ctx, "t"); rec.Outcome != record.OutcomeAnswered {
			t.Fatalf("the finished record was overwritten: %+v", rec)
		}
	})
}
