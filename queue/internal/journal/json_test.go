package journal

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// checkTurnRecordJSON fails t unless appendTurnRecordJSON (and
// appendIntentJSON, on an intent made of r's fields) writes what
// json.Marshal writes, or declines exactly where json.Marshal fails.
func checkTurnRecordJSON(t *testing.T, r *TurnRecord) {
	t.Helper()
	want, werr := json.Marshal(r)
	got, ok := appendTurnRecordJSON([]byte("prefix"), r)
	if !bytes.HasPrefix(got, []byte("prefix")) {
		t.Fatalf("appendTurnRecordJSON did not append: %q", got)
	}
	got = got[len("prefix"):]
	switch {
	case werr != nil && ok:
		t.Fatalf("json.Marshal fails (%v), appendTurnRecordJSON does not: %s", werr, got)
	case werr == nil && !ok:
		t.Fatalf("appendTurnRecordJSON declines what json.Marshal writes: %s", want)
	case werr == nil && !bytes.Equal(got, want):
		t.Fatalf("appendTurnRecordJSON differs from json.Marshal:\n got %s\nwant %s", got, want)
	}
	// The record's strings and times as an intent.
	for _, in := range []Intent{{TaskID: r.TaskID, Otid: r.Otid, Attempt: len(r.Attempts), Worker: r.AgentID, At: r.EnqueuedAt, Refused: r.Resends%2 != 0},
		{TaskID: r.RunID, Otid: r.Error, Attempt: -r.Resends, At: r.UpdatedAt}} {
		want, werr := json.Marshal(&in)
		got, ok := appendIntentJSON(nil, &in)
		if (werr == nil) != ok || (ok && !bytes.Equal(got, want)) {
			t.Fatalf("appendIntentJSON = %s, %v; json.Marshal = %s, %v", got, ok, want, werr)
		}
		if m, merr := MarshalIntent(&in); (merr == nil) != (werr == nil) || !bytes.Equal(m, want) {
			t.Fatalf("MarshalIntent = %s, %v; json.Marshal = %s, %v", m, merr, want, werr)
		}
	}
	m, merr := MarshalRecord(r)
	if (merr == nil) != (werr == nil) || !bytes.Equal(m, want) {
		t.Fatalf("MarshalRecord = %s, %v; json.Marshal = %s, %v", m, merr, want, werr)
	}
}

func TestTurnRecordJSONMatches(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 8, 42, 30, 123456789, time.UTC)
	zone := time.FixedZone("x", 5*3600+30*60)
	full := TurnRecord{
		TaskID: "task-1", Otid: "otid-1", AgentID: "agent-1", RunID: "run-1",
		Conversation: Conversation{Integration: "tg", ChatID: "42"},
		MessageID:    "m1", Queue: "default", ThreadMode: "agent", LettaConversationID: "conv-1",
		EnqueuedAt: t0, FirstStartedAt: t0.Add(time.Millisecond), FinishedAt: t0.Add(time.Second).In(zone),
		UpdatedAt: t0.Add(2 * time.Second), QueueWait: time.Millisecond,
		Attempts: []record.Attempt{
			{N: 1, Worker: "w1", Start: t0, End: t0.Add(time.Second), Phases: []PhaseMark{{Phase: "connecting", At: t0}, {Phase: "streaming", At: t0.Add(10)}},
				TimeoutClock: TimeoutClockStall, Polls: 2, Resumes: 1, ResendDecision: ResendSent, SentOtid: true, Outcome: OutcomeRetrying, Error: "boom", RetryIn: 4 * time.Second},
			{N: 2},
		},
		Waits:   []Wait{{From: t0, Until: t0.Add(time.Minute), Behind: "task-0", Reason: "waiting <behind>"}, {From: t0, Behind: "approval request r"}},
		Outcome: OutcomeAnswered, Error: "e", StopReason: "end_turn", PartialAnswer: "Let me <check>", Latency: time.Second, TTFT: -5,
		Usage:    &Usage{PromptTokens: 1, CompletionTokens: 2, TotalTokens: 3, StepCount: 4},
		Tools:    []ToolSummary{{Name: "t", CallID: "c", Duration: 7, Status: "ok"}, {}},
		Warnings: []string{"w<1>", ""},
		Approval: &ApprovalRecord{RequestTaskID: "r", Calls: []string{"a (b)"}, RequestedAt: t0, ExpiresAt: t0.Add(time.Hour),
			AnsweredBy: "x", AnsweredAt: t0.Add(time.Minute), Decision: "approved", Cause: "user", Waited: time.Minute},
		Resends: 3, AnsweredBy: "other", Merged: []string{"m2", "m3"},
		Cancel: &CancelRecord{By: "ops", At: t0, Reason: "wrong chat", Phase: CancelPhaseStreaming},
	}
	cases := map[string]TurnRecord{
		"zero":        {},
		"task only":   {TaskID: "t"},
		"full":        full,
		"empty parts": {TaskID: "t", Attempts: []record.Attempt{}, Waits: []Wait{}, Tools: []ToolSummary{}, Warnings: []string{}, Merged: []string{}, Usage: &Usage{}, Approval: &ApprovalRecord{}, Cancel: &CancelRecord{}},
		"usage one":   {TaskID: "t", Usage: &Usage{StepCount: 1}},
		"usage mid":   {TaskID: "t", Usage: &Usage{CompletionTokens: 9, TotalTokens: -1}},
		"escapes": {TaskID: "a\"b\\c\n\r\t\b\f\x00\x1f\x7f<>&'", Otid: "\u2028\u2029\u2027\u202a", AgentID: "\xff\xfe ok \xc3",
			RunID: "é😀\xed\xa0\x80", Error: "\xf0\x9f\x98", Warnings: []string{"</script>", "\xe2\x80\xa8"}},
		"phase zero time":    {TaskID: "t", Attempts: []record.Attempt{{Phases: []PhaseMark{{}}}}},
		"monotonic":          {TaskID: "t", EnqueuedAt: time.Now(), Attempts: []record.Attempt{{Start: time.Now()}}},
		"local zone":         {TaskID: "t", EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 0, time.Local)},
		"negative zone":      {TaskID: "t", EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("", -(9*3600+30*60)))},
		"zone seconds":       {TaskID: "t", EnqueuedAt: time.Date(2026, 1, 2, 3, 4, 5, 600, time.FixedZone("", 3600+17))},
		"year 0":             {TaskID: "t", EnqueuedAt: time.Date(0, 1, 1, 0, 0, 0, 1, time.UTC)},
		"year 9999":          {TaskID: "t", EnqueuedAt: time.Date(9999, 12, 31, 23, 59, 59, 999999999, time.UTC)},
		"year 10000":         {TaskID: "t", EnqueuedAt: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"year -1":            {TaskID: "t", FinishedAt: time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)},
		"zone hour 24":       {TaskID: "t", UpdatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 24*3600))},
		"zone hour -25":      {TaskID: "t", UpdatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", -25*3600))},
		"zone hour 100":      {TaskID: "t", UpdatedAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 100*3600))},
		"bad phase time":     {TaskID: "t", Attempts: []record.Attempt{{Phases: []PhaseMark{{At: time.Date(12345, 1, 1, 0, 0, 0, 0, time.UTC)}}}}},
		"bad approval time":  {TaskID: "t", Approval: &ApprovalRecord{AnsweredAt: time.Date(2026, 1, 1, 0, 0, 0, 0, time.FixedZone("", 30*3600))}},
		"min int durations":  {TaskID: "t", QueueWait: -1 << 63, Latency: 1<<63 - 1},
		"unix zero not zero": {TaskID: "t", EnqueuedAt: time.Unix(0, 0)},
	}
	for name, r := range cases {
		t.Run(name, func(t *testing.T) { checkTurnRecordJSON(t, &r) })
	}
}

// FuzzTurnRecordJSONMatches: appendTurnRecordJSON against json.Marshal on
// records made of the fuzzer's strings, numbers and times.
func FuzzTurnRecordJSONMatches(f *testing.F) {
	f.Add("task", "otid", "hello <world> & \u2028", int64(1764146550123456789), int64(0), int64(42), int32(0), uint16(0xffff))
	f.Add("\xff", "\xed\xa0\x80", "\x00\x1f\"\\", int64(-62135596800), int64(253402300800), int64(-1), int32(86400), uint16(0x5555))
	f.Add("", "", "", int64(0), int64(1), int64(0), int32(-3600*24-1), uint16(1))
	f.Fuzz(func(t *testing.T, s1, s2, s3 string, sec1, sec2, n int64, off int32, flags uint16) {
		zone := time.FixedZone("z", int(off))
		t1 := time.Unix(sec1, n).In(zone)
		t2 := time.Unix(sec2, -n).UTC()
		bit := func(i uint) bool { return flags&(1<<i) != 0 }
		pick := func(i uint, s string) string {
			if bit(i) {
				return s
			}
			return ""
		}
		pickT := func(i uint, t time.Time) time.Time {
			if bit(i) {
				return t
			}
			return time.Time{}
		}
		r := TurnRecord{
			TaskID: s1, Otid: pick(0, s2), AgentID: pick(1, s3), RunID: pick(2, s1+s2),
			Conversation: Conversation{Integration: s3, ChatID: pick(3, s2)},
			MessageID:    pick(4, s3), Queue: pick(5, s1), ThreadMode: pick(6, s2), LettaConversationID: pick(7, s3),
			EnqueuedAt: pickT(8, t1), FirstStartedAt: pickT(9, t2), FinishedAt: pickT(10, t1), UpdatedAt: t2,
			QueueWait: time.Duration(n), Outcome: pick(11, s1), Error: pick(12, s2), StopReason: pick(13, s3),
			Latency: time.Duration(sec1), TTFT: time.Duration(sec2), Resends: int(n), AnsweredBy: pick(14, s2),
		}
		if bit(15) {
			r.Attempts = []record.Attempt{
				{N: int(n), Worker: s2, Start: t1, End: pickT(0, t2), Phases: []PhaseMark{{Phase: s3, At: t2}, {Phase: s1, At: t1}},
					TimeoutClock: pick(1, s1), Polls: int(sec1), Resumes: int(sec2), ResendDecision: pick(2, s3), SentOtid: bit(3),
					Outcome: pick(4, s2), Error: pick(5, s3)},
				{N: 2, Phases: []PhaseMark{}},
			}
			r.Warnings = []string{s1, s2, s3}
			r.Merged = []string{s3}
		}
		if bit(6) {
			r.Usage = &Usage{PromptTokens: int(n), CompletionTokens: int(sec1), TotalTokens: pickInt(bit(7), int(sec2)), StepCount: pickInt(bit(8), 1)}
		}
		if bit(9) {
			r.Tools = []ToolSummary{{Name: s1, CallID: pick(10, s2), Duration: time.Duration(n), Status: pick(11, s3)}}
		}
		if bit(12) {
			r.Approval = &ApprovalRecord{RequestTaskID: s2, Calls: []string{s3}, RequestedAt: pickT(13, t1), ExpiresAt: t2,
				AnsweredBy: pick(14, s1), AnsweredAt: pickT(0, t2), Decision: pick(1, s3), Cause: pick(2, s1), Waited: time.Duration(n)}
		}
		checkTurnRecordJSON(t, &r)
	})
}

func pickInt(ok bool, n int) int {
	if ok {
		return n
	}
	return 0
}

// benchTurnRecord is an instant turn's final record.
func benchTurnRecord() *TurnRecord {
	t0 := time.Date(2026, 11, 26, 8, 42, 30, 123456789, time.UTC)
	return &TurnRecord{
		TaskID: "01JDXQ7Z8K3M4N5P6Q7R8S9T0V", Otid: "otid-01JDXQ7Z8K3M4N5P6Q7R8S9T0V", AgentID: "agent-3f1c2b7e-8d4a-4f2e-9c1d-5b6a7e8f9a0b",
		RunID: "run-7c9e6679-7425-40de-944b-e07fc1f90ae7", Conversation: Conversation{Integration: "telegram", ChatID: "123456789"},
		MessageID: "msg-42", Queue: "default", ThreadMode: "agent",
		EnqueuedAt: t0, FirstStartedAt: t0.Add(1500 * time.Microsecond), FinishedAt: t0.Add(9 * time.Millisecond), UpdatedAt: t0.Add(9 * time.Millisecond),
		QueueWait: 1500 * time.Microsecond,
		Attempts: []record.Attempt{{N: 1, Worker: "bench-host-1234", Start: t0.Add(1500 * time.Microsecond), End: t0.Add(9 * time.Millisecond),
			Phases:         []PhaseMark{{Phase: "connecting", At: t0.Add(2 * time.Millisecond)}, {Phase: "streaming", At: t0.Add(4 * time.Millisecond)}},
			ResendDecision: ResendNotNeeded, SentOtid: true, Outcome: OutcomeAnswered}},
		Outcome: OutcomeAnswered, StopReason: "end_turn", Latency: 9 * time.Millisecond, TTFT: 5 * time.Millisecond,
		Usage: &Usage{PromptTokens: 1200, CompletionTokens: 34, TotalTokens: 1234, StepCount: 1},
	}
}

// BenchmarkTurnRecordEncode: an instant turn's final record by json.Marshal
// (old) and by MarshalRecord (new), and its intent by json.Marshal and
// MarshalIntent, in one run.
func BenchmarkTurnRecordEncode(b *testing.B) {
	r := benchTurnRecord()
	b.Run("json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("MarshalRecord", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := MarshalRecord(r); err != nil {
				b.Fatal(err)
			}
		}
	})
	in := &Intent{TaskID: r.TaskID, Otid: r.Otid, Attempt: 1, Worker: r.Attempts[0].Worker, At: r.FirstStartedAt}
	b.Run("intent/json.Marshal", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("intent/MarshalIntent", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := MarshalIntent(in); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkJournalSaveOp: the whole of a save's encoding (record, keys,
// script arguments) for an instant turn's final record.
func BenchmarkJournalSaveOp(b *testing.B) {
	_, sv := testJournal(nil, "lettaq:", 0, 0, nil)
	r := benchTurnRecord()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := sv.SaveOp(r, false, 0, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// saveArgs names the record's keys and every index, and flags the indexes
// the record belongs in.
func TestJournalSaveArgsKeys(t *testing.T) {
	st, sv := testJournal(nil, "{p}:", time.Hour, 7, nil)
	r := &TurnRecord{TaskID: "task:1", Otid: "o-1", Outcome: OutcomeFailed, Resends: 1, Attempts: []record.Attempt{{N: 1}, {N: 2, TimeoutClock: "stall"}}}
	keys, args, err := saveKeysArgs(sv, r, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{st.Keys.Journal().Turn("task:1"), st.Keys.Journal().Otid("o-1"), st.Keys.Journal().Intents("task:1"), "{p}:journal:runners:task:1"}
	for i := range numIndexes {
		want = append(want, indexKey(st, i))
	}
	if fmt.Sprint(keys) != fmt.Sprint(want) {
		t.Fatalf("keys %q, want %q", keys, want)
	}
	if got := fmt.Sprint(args[1:]); got != "[task:1 o-1 3600000 "+fmt.Sprint(args[4])+" 0 7 1 0 1 1 1 1 1 1]" {
		t.Fatalf("args %v", got)
	}
	r.Otid, r.Outcome, r.Resends, r.Attempts = "", "", 0, nil
	keys, args, _ = saveKeysArgs(sv, r, false, nil)
	if keys[1] != "{p}:journal:otid:" || fmt.Sprint(args[7:]) != "[0 0 1 0 0 0 0 0]" {
		t.Fatalf("keys %q args %v", keys, args[7:])
	}
}

// saveKeysArgs is saveArgs' command split as go-redis's Script.Run takes
// it: the keys, then the arguments.
func saveKeysArgs(sv *Saver, rec *TurnRecord, keepFinished bool, ix *Indexed) ([]string, []any, error) {
	cmd, err := sv.saveArgs(rec, keepFinished, 0, ix)
	if err != nil {
		return nil, nil, err
	}
	if cmd[0] != "evalsha" || cmd[1] != store.JournalSave.Hash() {
		return nil, nil, fmt.Errorf("saveArgs: command %v", cmd[:2])
	}
	n := cmd[2].(int)
	keys := make([]string, n)
	for i := range keys {
		keys[i] = cmd[3+i].(string)
	}
	return keys, cmd[3+n:], nil
}
