package queue

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"

	"github.com/google/uuid"

	"github.com/lettaq/lettaq/internal/testredis"
)

// BenchmarkHeartbeat measures what a thinking turn's heartbeat costs the
// worker: each op is one beat of every one of 1,000 turns (the phase
// repeated, as Heartbeat emits it every 4 s), queued lazily and written by
// the writer in one round trip, as they are in a worker. allocs/beat and
// B/beat are per turn's beat: encoding, queueing, the pipeline, the reply.
// Redis: REDIS_URL or 127.0.0.1:6379 when it answers, else miniredis.
func BenchmarkHeartbeat(b *testing.B) {
	const turns = 1000
	srv := testredis.New(b)
	rdb := srv.Client(b)
	prefix := "lettaqbench:" + uuid.NewString() + ":"
	defer func() {
		ctx := context.Background()
		var keys []string
		it := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for it.Next(ctx) {
			keys = append(keys, it.Val())
		}
		for len(keys) > 0 {
			n := min(len(keys), 500)
			rdb.Del(ctx, keys[:n]...)
			keys = keys[n:]
		}
	}()
	r := NewReplies(rdb, RepliesOptions{Prefix: prefix, MaxLen: 16})
	wr := progress.NewWriter(rdb, r.st, r.complete)
	ps := make([]*progress.Queue, turns)
	evs := make([]record.ReplyEvent, turns)
	for i := range ps {
		ps[i] = wr.NewQueue(record.Conversation{Integration: "bench", ChatID: fmt.Sprintf("chat-%d", i)}, func(err error) { b.Error(err) }, nil)
		evs[i] = record.ReplyEvent{Type: record.EventPhase, Phase: record.PhaseStreaming, TaskID: "turn:bench:" + uuid.NewString(),
			Otid: uuid.NewString(), RunID: "run-" + uuid.NewString(), MessageID: fmt.Sprintf("m-%d", i)}
	}
	beat := func(k int) {
		for i, p := range ps {
			ev := evs[i]
			ev.Elapsed = 4 * time.Second * time.Duration(1+k)
			p.PushLazy(ev)
		}
		ps[0].Flush(context.Background()) // writes every turn's beat now
	}
	for k := range 3 {
		beat(k)
	}
	b.ReportAllocs()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	b.ResetTimer()
	for k := range b.N {
		beat(k)
	}
	b.StopTimer()
	runtime.ReadMemStats(&m1)
	beats := float64(b.N * turns)
	b.ReportMetric(float64(m1.Mallocs-m0.Mallocs)/beats, "allocs/beat")
	b.ReportMetric(float64(m1.TotalAlloc-m0.TotalAlloc)/beats, "B/beat")
	for _, p := range ps {
		p.Close()
	}
}

// TestReplyDataMatchesJSON: an event's data, encoded by hand, is the bytes json.Marshal makes,
// for every type and field; an event with an approval falls back to json.Marshal.
func TestReplyDataMatchesJSON(t *testing.T) {
	at := time.Date(2026, 11, 26, 6, 0, 0, 123456789, time.UTC)
	long := strings.Repeat("a long answer <b>&\u00e9 ", 40)
	for _, ev := range []record.ReplyEvent{
		{Type: record.EventPhase, Phase: record.PhaseThinking, Elapsed: 4 * time.Second},
		{Type: record.EventPhase, Phase: record.PhaseStreaming},
		{Type: record.EventPhase, Phase: record.PhaseToolRunning, Elapsed: 1500 * time.Microsecond},
		{Type: record.EventPhase, Phase: record.PhaseContinuing, Elapsed: -3 * time.Millisecond},
		{Type: record.EventPhase, Phase: "a<b>&\"c\"\\", Elapsed: time.Hour},
		{Type: record.EventPhase, Phase: "\u00e9t\u00e9\n\u2028\xff", Elapsed: time.Second},
		{Type: record.EventPhase, Phase: "awaiting_approval", Position: 2, StopReason: "x"},
		{Type: record.EventAccepted, Phase: record.PhaseQueued},
		{Type: record.EventAccepted, Position: 3},
		{Type: record.EventAnswerDelta, Text: "hi"},
		{Type: record.EventAnswerDelta},
		{Type: record.EventAnswerDelta, Text: "thinking aloud", Narration: true},
		{Type: record.EventAnswer, Text: "hello", Parts: []string{"hel", "lo"}, StopReason: "end_turn"},
		{Type: record.EventAnswer},
		{Type: record.EventAnswer, Text: long, Parts: []string{long[:500], long[500:]}, AnsweredBy: "task-1"},
		{Type: record.EventTool, Tool: &record.ToolEvent{Name: "search", CallID: "c1", Arguments: `{"q":"x<y"}`, Status: "success", Return: long, Truncated: true}},
		{Type: record.EventTool, Tool: &record.ToolEvent{}},
		{Type: record.EventError, Text: "it broke", Permanent: true},
		{Type: record.EventError},
		{Type: record.EventPhase, Phase: record.PhaseAwaitingApproval, Approval: &record.ApprovalEvent{RequestTaskID: "r", Calls: []record.ToolEvent{{Name: "n"}}}},
		{Type: record.EventApprovalRequired, Text: "approve?", Approval: &record.ApprovalEvent{RequestTaskID: "r", ExpiresAt: at}},
	} {
		ev.Time = at
		gotAt, gotData, err := encodeTimeData(&ev)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := ev.DataJSON()
		if gotData != string(want) || gotAt != at.Format(time.RFC3339Nano) {
			t.Errorf("%+v: got %s %s, want %s %s", ev, gotAt, gotData, at.Format(time.RFC3339Nano), want)
		}
	}
}

// FuzzReplyDataMatchesJSON: appendReplyData against json.Marshal on events made of the
// fuzzer's strings and numbers.
func FuzzReplyDataMatchesJSON(f *testing.F) {
	f.Add(uint8(4), "hello <world> & \u2028", "\xff\x00\"", int64(1500), 2, uint16(0xffff))
	f.Add(uint8(0), "", "", int64(0), 0, uint16(0))
	f.Fuzz(func(t *testing.T, typ uint8, s1, s2 string, elapsed int64, pos int, flags uint16) {
		types := []record.EventType{record.EventPhase, record.EventAccepted, record.EventTool, record.EventAnswerDelta, record.EventAnswer, record.EventError, "other"}
		bit := func(i uint) bool { return flags&(1<<i) != 0 }
		pick := func(i uint, s string) string {
			if bit(i) {
				return s
			}
			return ""
		}
		ev := record.ReplyEvent{Type: types[int(typ)%len(types)], Phase: record.ReplyPhase(pick(0, s1)), Elapsed: time.Duration(elapsed),
			Text: pick(1, s2), Narration: bit(2), StopReason: pick(3, s1), Permanent: bit(4), AnsweredBy: pick(5, s2)}
		if bit(6) {
			ev.Position = pos
		}
		if bit(7) {
			ev.Parts = []string{s1, s2}
		}
		if bit(8) {
			ev.Parts = []string{}
		}
		if bit(9) {
			ev.Tool = &record.ToolEvent{Name: pick(10, s1), CallID: pick(11, s2), Arguments: pick(12, s1), Status: pick(13, s2),
				Return: pick(14, s1+s2), Truncated: bit(15)}
		}
		got, ok := appendReplyData(nil, &ev)
		want, err := ev.DataJSON()
		if !ok || err != nil || string(got) != string(want) {
			t.Fatalf("%+v: got %s (%v), want %s (%v)", ev, got, ok, want, err)
		}
	})
}

// TestHeartbeatPrepareAllocs pins what encoding a heartbeat costs once the
// turn's head is boxed: its time and data (one string) and their two
// interface values.
func TestHeartbeatPrepareAllocs(t *testing.T) {
	r := NewReplies(nil, RepliesOptions{})
	c := record.Conversation{Integration: "telegram", ChatID: "42"}
	ev := record.ReplyEvent{Type: record.EventPhase, Phase: record.PhaseThinking, TaskID: "turn:telegram:42:1", Otid: "otid-1", RunID: "run-1", MessageID: "m-1"}
	var pe progress.Event
	var head *store.Head
	if err := r.prepareInto(&pe, &head, c, ev, ""); err != nil {
		t.Fatal(err)
	}
	first := head
	n := testing.AllocsPerRun(100, func() {
		ev.Elapsed += 4 * time.Second
		if err := r.prepareInto(&pe, &head, c, ev, ""); err != nil {
			t.Fatal(err)
		}
	})
	if head != first {
		t.Error("a repeated heartbeat did not reuse the turn's head")
	}
	if n > 3 {
		t.Errorf("a heartbeat's encoding allocates %.1f times, want at most 3", n)
	}
	// A field that changes (the run id, learned late) makes a new head.
	ev.RunID = "run-2"
	if err := r.prepareInto(&pe, &head, c, ev, ""); err != nil {
		t.Fatal(err)
	}
	if r := head.Rest(); head == first || r[5] != "run_id" || r[6] != "run-2" {
		t.Errorf("head after a new run id: %v", head.Args())
	}
	// Another type of event with the same fields keeps the head: a turn's phases, deltas
	// and tools alternate.
	second := head
	ev.Type, ev.Phase, ev.Text = record.EventAnswerDelta, "", "hel"
	if err := r.prepareInto(&pe, &head, c, ev, ""); err != nil {
		t.Fatal(err)
	}
	if head != second {
		t.Error("an answer delta after a phase made a new head")
	}
	if args := appendArgs(&pe, nil); len(args) != 18 || args[4] != "type" || args[5] != "answer_delta" || args[12] != "message_id" || args[14] != "time" {
		t.Errorf("event args %v", args)
	}
}
