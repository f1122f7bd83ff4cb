package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// rjBackend is one Redis that the reply and journal tests run against
// (testkit's Backend, with the names these tests use).
type rjBackend struct {
	name   string
	srv    *testredis.Server
	rdb    *redis.Client
	prefix string // unique to the (sub)test; its keys are deleted at the end
}

// rjEach runs fn against the real Redis and miniredis (testkit.EachRedis).
func rjEach(t *testing.T, fn func(t *testing.T, b rjBackend)) {
	t.Helper()
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		fn(t, rjBackend{name: b.Name, srv: b.Srv, rdb: b.RDB, prefix: b.Prefix})
	})
}

func rjDeletePrefix(t *testing.T, rdb *redis.Client, prefix string) {
	if err := testkit.DeletePrefix(context.Background(), rdb, prefix); err != nil {
		t.Logf("cleanup %s: %v", prefix, err)
	}
}

// rjClock is a settable clock for tests.
type rjClock struct {
	mu sync.Mutex
	t  time.Time
}

func newRJClock() *rjClock {
	return &rjClock{t: time.Date(2025, 3, 4, 5, 6, 7, 123456789, time.UTC)}
}

func (c *rjClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *rjClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var rjConv = record.Conversation{Integration: "telegram", ChatID: "-100123:45"}

func TestRepliesKey(t *testing.T) {
	r := NewReplies(nil, RepliesOptions{})
	if got, want := r.Key(record.Conversation{Integration: "slack", ChatID: "C1:T2"}), "lettaq:replies:slack:C1:T2"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	r = NewReplies(nil, RepliesOptions{Prefix: "{x}:"})
	if got, want := r.Key(record.Conversation{Integration: "web", ChatID: "abc"}), "{x}:replies:web:abc"; got != want {
		t.Fatalf("Key = %q, want %q", got, want)
	}
	for _, c := range []record.Conversation{{Integration: "", ChatID: "1"}, {Integration: "tele:gram", ChatID: "1"}, {Integration: "tele gram", ChatID: "1"}, {Integration: "telegram", ChatID: ""}} {
		if err := c.Validate(); !errors.Is(err, record.ErrInvalidEvent) {
			t.Errorf("Validate(%+v) = %v, want ErrInvalidEvent", c, err)
		}
	}
	if err := rjConv.Validate(); err != nil {
		t.Errorf("Validate(%+v) = %v", rjConv, err)
	}
}

// Two workers (two Replies on two connections) emit events of one turn,
// some in turn and some at the same time: seq is 1..N with no gap or
// repeat, and the stream holds them in seq order.
func TestRepliesSeqAcrossInstances(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		w1 := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		w2 := NewReplies(b.srv.Client(t), RepliesOptions{Prefix: b.prefix})

		var want int64
		for i := range 6 {
			w := w1
			if i%2 == 1 {
				w = w2
			}
			ev, err := w.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventPhase, TaskID: "t1", Phase: record.PhaseStreaming})
			if err != nil {
				t.Fatal(err)
			}
			want++
			if ev.Seq != want {
				t.Fatalf("emit %d: seq %d, want %d", i, ev.Seq, want)
			}
		}
		// Another turn in the same conversation has its own sequence.
		if ev, err := w2.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t2", Phase: record.PhaseQueued}); err != nil || ev.Seq != 1 {
			t.Fatalf("other turn: seq %d, err %v; want 1", ev.Seq, err)
		}

		var wg sync.WaitGroup
		for g := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w := []*Replies{w1, w2}[g%2]
				for range 5 {
					if _, err := w.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "x"}); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()

		evs, _, err := w1.Read(ctx, rjConv, "0", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var last int64
		n := 0
		for _, ev := range evs {
			if ev.TaskID != "t1" {
				continue
			}
			n++
			if ev.Seq != last+1 {
				t.Fatalf("event %d of t1: seq %d after %d", n, ev.Seq, last)
			}
			last = ev.Seq
		}
		if n != 106 {
			t.Fatalf("t1 has %d events, want 106", n)
		}
	})
}

// Twenty attempts race to answer one turn: exactly one answer is written.
func TestRepliesEmitAnswerOnceConcurrent(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners int
		)
		for g := range 20 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
				ok, err := r.EmitAnswerOnce(ctx, rjConv, record.ReplyEvent{TaskID: "turn", Text: fmt.Sprintf("answer from %d", g)})
				if err != nil {
					t.Error(err)
					return
				}
				if ok {
					mu.Lock()
					winners++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if winners != 1 {
			t.Fatalf("%d attempts emitted an answer, want 1", winners)
		}
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		evs, _, err := r.Read(ctx, rjConv, "0", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 1 || evs[0].Type != record.EventAnswer || evs[0].Seq != 1 {
			t.Fatalf("stream = %+v, want one answer with seq 1", evs)
		}
		if ok, err := r.Answered(ctx, "turn"); err != nil || !ok {
			t.Fatalf("Answered = %v, %v; want true", ok, err)
		}
		if ok, err := r.Answered(ctx, "other"); err != nil || ok {
			t.Fatalf("Answered(other) = %v, %v; want false", ok, err)
		}
		// A late retry: no second answer, not even as an error event.
		if ok, err := r.EmitAnswerOnce(ctx, rjConv, record.ReplyEvent{Type: record.EventError, TaskID: "turn", Text: "boom", Permanent: true}); err != nil || ok {
			t.Fatalf("late EmitAnswerOnce = %v, %v; want false", ok, err)
		}
		// The marker expires with TTL.
		ttl, err := b.rdb.PTTL(ctx, b.prefix+"answered:turn").Result()
		if err != nil || ttl <= 6*24*time.Hour || ttl > 7*24*time.Hour {
			t.Fatalf("answered marker TTL = %v, %v; want about 7 days", ttl, err)
		}
		if evs, _, _ := r.Read(ctx, rjConv, "0", 0, 0); len(evs) != 1 {
			t.Fatalf("stream has %d events after late retry, want 1", len(evs))
		}
		// Progress events of the turn still get the next seq.
		if ev, err := r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventPhase, TaskID: "turn", Phase: record.PhaseRecovering}); err != nil || ev.Seq != 2 {
			t.Fatalf("Emit after answer: seq %d, %v; want 2", ev.Seq, err)
		}
		if _, err := r.EmitAnswerOnce(ctx, rjConv, record.ReplyEvent{Type: record.EventPhase, TaskID: "turn", Phase: "x"}); !errors.Is(err, record.ErrInvalidEvent) {
			t.Fatalf("EmitAnswerOnce(phase) = %v, want ErrInvalidEvent", err)
		}
	})
}

func TestRepliesStreamCapped(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix, MaxLen: 10})
		const total = 400
		for range total {
			if _, err := r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t", Text: "x"}); err != nil {
				t.Fatal(err)
			}
		}
		n, err := b.rdb.XLen(ctx, r.Key(rjConv)).Result()
		if err != nil {
			t.Fatal(err)
		}
		// MAXLEN ~ trims whole radix-tree nodes only, so a real Redis may
		// keep up to one node more than asked; miniredis trims exactly.
		bound := int64(10)
		if b.srv.Real {
			node := int64(100)
			if v, err := b.rdb.ConfigGet(ctx, "stream-node-max-entries").Result(); err == nil {
				fmt.Sscan(v["stream-node-max-entries"], &node)
			}
			bound += node
		}
		if n < 10 || n > bound {
			t.Fatalf("stream length %d after %d events, want 10..%d", n, total, bound)
		}
		evs, _, err := r.Read(ctx, rjConv, "0", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if got := evs[len(evs)-1].Seq; got != total {
			t.Fatalf("newest event has seq %d, want %d", got, total)
		}
	})
}

func rjAllEvents() []record.ReplyEvent {
	return []record.ReplyEvent{
		{Type: record.EventAccepted, TaskID: "t", MessageID: "m1", Phase: record.PhaseQueued, Position: 0},
		{Type: record.EventAccepted, TaskID: "t", MessageID: "m1", Phase: record.PhaseQueued, Position: 3},
		{Type: record.EventPhase, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Phase: record.PhaseThinking, Elapsed: 4200 * time.Millisecond},
		{Type: record.EventTool, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Tool: &record.ToolEvent{Name: "web_search", CallID: "c1", Arguments: `{"q":"go"}`, Status: record.ToolStatusCall}},
		{Type: record.EventTool, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Tool: &record.ToolEvent{Name: "web_search", CallID: "c1", Status: record.ToolStatusSuccess, Return: "found"}},
		{Type: record.EventAnswerDelta, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Text: "Let me think…", Narration: true},
		{Type: record.EventAnswerDelta, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Text: "Hello\n"},
		{Type: record.EventAnswer, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Text: "Hello\nworld", Parts: []string{"Hello\n", "world"}, StopReason: "end_turn"},
		{Type: record.EventAnswer, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m2", Text: "", Parts: []string{}, AnsweredBy: "t0"},
		{Type: record.EventApprovalRequired, TaskID: "t", Otid: "o", RunID: "run-1", MessageID: "m1", Tool: &record.ToolEvent{Name: "delete_file", CallID: "c2", Arguments: `{"path":"/x"}`, Status: record.ToolStatusCall}},
		{Type: record.EventError, TaskID: "t", Otid: "o", MessageID: "m1", Text: "agent unreachable", Permanent: true, StopReason: "error"},
		{Type: record.EventError, TaskID: "t", Text: "stalled; retrying"},
	}
}

// Every field survives Emit and Read, for every event type.
func TestRepliesReadRoundTrip(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		clock := newRJClock()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix, Now: clock.Now})
		var written []record.ReplyEvent
		for _, ev := range rjAllEvents() {
			clock.Advance(1500 * time.Microsecond)
			got, err := r.Emit(ctx, rjConv, ev)
			if err != nil {
				t.Fatalf("Emit(%+v): %v", ev, err)
			}
			if got.ID == "" || !got.Time.Equal(clock.Now()) {
				t.Fatalf("Emit returned ID %q, Time %v; want an id and %v", got.ID, got.Time, clock.Now())
			}
			ev.ID, ev.Seq, ev.Time = got.ID, got.Seq, got.Time
			if !reflect.DeepEqual(got, ev) {
				t.Fatalf("Emit returned\n %+v\nwant\n %+v", got, ev)
			}
			written = append(written, got)
		}
		read, lastID, err := r.Read(ctx, rjConv, "0", 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(read) != len(written) {
			t.Fatalf("read %d events, want %d", len(read), len(written))
		}
		for i := range read {
			if !read[i].Time.Equal(written[i].Time) {
				t.Errorf("event %d: time %v, want %v", i, read[i].Time, written[i].Time)
			}
			read[i].Time = written[i].Time
			if !reflect.DeepEqual(read[i], written[i]) {
				t.Errorf("event %d:\n read %+v\n want %+v", i, read[i], written[i])
			}
			if read[i].Tool != nil && !reflect.DeepEqual(*read[i].Tool, *written[i].Tool) {
				t.Errorf("event %d: tool %+v, want %+v", i, *read[i].Tool, *written[i].Tool)
			}
		}
		if lastID != written[len(written)-1].ID {
			t.Fatalf("lastID %q, want %q", lastID, written[len(written)-1].ID)
		}
		// count pages through.
		page, next, err := r.Read(ctx, rjConv, "", 5, 0)
		if err != nil || len(page) != 5 || next != written[4].ID {
			t.Fatalf("Read count 5: %d events, next %q, %v", len(page), next, err)
		}
		page, _, err = r.Read(ctx, rjConv, next, 5, 0)
		if err != nil || len(page) != 5 || page[0].ID != written[5].ID {
			t.Fatalf("Read after %q: %+v, %v", next, page, err)
		}
	})
}

// The stream entry is exactly the documented wire format.
func TestRepliesWireFormat(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		clock := newRJClock()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix, Now: clock.Now})
		cases := []struct {
			ev   record.ReplyEvent
			data string
		}{
			{record.ReplyEvent{Type: record.EventAccepted, TaskID: "t", MessageID: "m", Phase: record.PhaseQueued}, `{"phase":"queued","position":0}`},
			{record.ReplyEvent{Type: record.EventPhase, TaskID: "t", Otid: "o", RunID: "r", Phase: record.PhaseThinking, Elapsed: 1234567 * time.Microsecond}, `{"phase":"thinking","elapsed_ms":1234}`},
			{record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t", Text: "hm", Narration: true}, `{"text":"hm","narration":true}`},
			{record.ReplyEvent{Type: record.EventAnswer, TaskID: "t", Text: "a b", StopReason: "end_turn"}, `{"text":"a b","parts":["a b"],"stop_reason":"end_turn"}`},
			{record.ReplyEvent{Type: record.EventAnswer, TaskID: "t"}, `{"text":"","parts":[]}`},
			{record.ReplyEvent{Type: record.EventTool, TaskID: "t", Tool: &record.ToolEvent{Name: "f", CallID: "c", Arguments: "{}", Status: record.ToolStatusCall}}, `{"tool":{"name":"f","call_id":"c","arguments":"{}","status":"call"}}`},
			{record.ReplyEvent{Type: record.EventError, TaskID: "t", Text: "x"}, `{"text":"x","permanent":false}`},
		}
		for _, c := range cases {
			ev, err := r.Emit(ctx, rjConv, c.ev)
			if err != nil {
				t.Fatal(err)
			}
			msgs, err := b.rdb.XRange(ctx, r.Key(rjConv), ev.ID, ev.ID).Result()
			if err != nil || len(msgs) != 1 {
				t.Fatalf("XRANGE %s: %v, %v", ev.ID, msgs, err)
			}
			want := map[string]any{
				"type": string(c.ev.Type), "task_id": c.ev.TaskID, "otid": c.ev.Otid, "run_id": c.ev.RunID,
				"message_id": c.ev.MessageID, "seq": fmt.Sprint(ev.Seq), "time": "2025-03-04T05:06:07.123456789Z",
				"data": c.data,
			}
			if !reflect.DeepEqual(msgs[0].Values, want) {
				t.Errorf("%s entry:\n got %v\nwant %v", c.ev.Type, msgs[0].Values, want)
			}
		}
	})
}

func TestRepliesReadFollow(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		// "$" on a stream that does not exist yet: nothing, and a concrete id.
		evs, last, err := r.Read(ctx, rjConv, "$", 10, 0)
		if err != nil || len(evs) != 0 || last != "0-0" {
			t.Fatalf("Read($) on empty = %v, %q, %v; want nothing, 0-0", evs, last, err)
		}
		old, err := r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventPhase, TaskID: "t", Phase: record.PhaseConnecting})
		if err != nil {
			t.Fatal(err)
		}
		// "$" skips what is already there.
		evs, last, err = r.Read(ctx, rjConv, "$", 10, 0)
		if err != nil || len(evs) != 0 || last != old.ID {
			t.Fatalf("Read($) = %v, %q, %v; want nothing, %q", evs, last, err, old.ID)
		}
		// A blocking read wakes up for an event written meanwhile.
		done := make(chan record.ReplyEvent, 1)
		go func() {
			evs, _, err := r.Read(ctx, rjConv, last, 10, 10*time.Second)
			if err != nil || len(evs) != 1 {
				t.Errorf("blocking Read = %v, %v", evs, err)
				close(done)
				return
			}
			done <- evs[0]
		}()
		var sent record.ReplyEvent
		// Keep emitting until the reader has its event: whether the first
		// emit lands before or after XREAD starts blocking, the reader sees
		// exactly the first event after last.
	emitting:
		for i := 0; ; i++ {
			ev, err := r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t", Text: fmt.Sprint(i)})
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				sent = ev
			}
			select {
			case got := <-done:
				if got.ID != sent.ID || got.Text != "0" {
					t.Fatalf("blocking Read got %+v, want %+v", got, sent)
				}
				break emitting
			case <-time.After(20 * time.Millisecond):
			}
		}
		// A wait that ends with nothing is not an error.
		all, _, _ := r.Read(ctx, rjConv, "0", 0, 0)
		end := all[len(all)-1].ID
		evs, last, err = r.Read(ctx, rjConv, end, 10, 5*time.Millisecond)
		if err != nil || len(evs) != 0 || last != end {
			t.Fatalf("Read timeout = %v, %q, %v; want nothing, %q", evs, last, err, end)
		}
		if _, _, err := r.Read(ctx, record.Conversation{Integration: "a:b", ChatID: "c"}, "0", 0, 0); !errors.Is(err, record.ErrInvalidEvent) {
			t.Fatalf("Read(bad conversation) = %v", err)
		}
	})
}

func TestRepliesEmitValidation(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		bad := []struct {
			c  record.Conversation
			ev record.ReplyEvent
		}{
			{rjConv, record.ReplyEvent{Type: "answered", TaskID: "t"}},
			{rjConv, record.ReplyEvent{TaskID: "t"}},
			{rjConv, record.ReplyEvent{Type: record.EventAnswer}},
			{rjConv, record.ReplyEvent{Type: record.EventPhase, TaskID: "t"}},
			{rjConv, record.ReplyEvent{Type: record.EventTool, TaskID: "t"}},
			{rjConv, record.ReplyEvent{Type: record.EventApprovalRequired, TaskID: "t"}},
			{record.Conversation{Integration: "telegram"}, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t"}},
			{record.Conversation{Integration: "tele:gram", ChatID: "1"}, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t"}},
		}
		for _, c := range bad {
			if _, err := r.Emit(ctx, c.c, c.ev); !errors.Is(err, record.ErrInvalidEvent) {
				t.Errorf("Emit(%+v, %+v) = %v, want ErrInvalidEvent", c.c, c.ev, err)
			}
		}
		if n, _ := b.rdb.Exists(ctx, r.Key(rjConv)).Result(); n != 0 {
			t.Fatalf("invalid events were written")
		}
	})
}

func TestRepliesEmitShapesEvents(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix, PartLimits: map[string]int{"telegram": 5}})

		// Parts are filled in from the integration's limit.
		ev, err := r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t", Text: "hello world"})
		if err != nil {
			t.Fatal(err)
		}
		if want := []string{"hello", " ", "world"}; !reflect.DeepEqual(ev.Parts, want) {
			t.Fatalf("Parts = %q, want %q", ev.Parts, want)
		}
		web := record.Conversation{Integration: "web", ChatID: "1"}
		if ev, _ := r.Emit(ctx, web, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t", Text: "hello world"}); !reflect.DeepEqual(ev.Parts, []string{"hello world"}) {
			t.Fatalf("web Parts = %q", ev.Parts)
		}

		// A long tool return is cut at a rune boundary; the caller's value is untouched.
		ret := strings.Repeat("é", MaxToolReturnBytes) // 2 bytes each
		tool := &record.ToolEvent{Name: "f", Status: record.ToolStatusSuccess, Return: ret + "!"}
		ev, err = r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventTool, TaskID: "t", Tool: tool})
		if err != nil {
			t.Fatal(err)
		}
		if tool.Return != ret+"!" || tool.Truncated {
			t.Fatalf("Emit modified the caller's tool")
		}
		if len(ev.Tool.Return) != MaxToolReturnBytes || !ev.Tool.Truncated || !strings.HasPrefix(ret, ev.Tool.Return) {
			t.Fatalf("returned tool: %d bytes, truncated %v", len(ev.Tool.Return), ev.Tool.Truncated)
		}
		odd := strings.Repeat("a", MaxToolReturnBytes-1) + "é"
		ev, _ = r.Emit(ctx, rjConv, record.ReplyEvent{Type: record.EventTool, TaskID: "t", Tool: &record.ToolEvent{Return: odd}})
		if ev.Tool.Return != odd[:MaxToolReturnBytes-1] {
			t.Fatalf("cut inside a rune: %d bytes", len(ev.Tool.Return))
		}
		evs, _, _ := r.Read(ctx, rjConv, "0", 0, 0)
		if got := evs[len(evs)-2].Tool; got.Return != ret[:MaxToolReturnBytes] || !got.Truncated {
			t.Fatalf("read tool return: %d bytes, truncated %v", len(got.Return), got.Truncated)
		}
	})
}

func TestReplyEventJSON(t *testing.T) {
	for _, ev := range rjAllEvents() {
		ev.ID, ev.Seq, ev.Time = "1-1", 7, time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)
		b, err := json.Marshal(ev)
		if err != nil {
			t.Fatal(err)
		}
		var back record.ReplyEvent
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
		if !reflect.DeepEqual(back, ev) {
			t.Errorf("JSON round trip:\n got %+v\nwant %+v\n via %s", back, ev, b)
		}
	}
	b, _ := json.Marshal(record.ReplyEvent{ID: "5-0", Type: record.EventPhase, TaskID: "t", Seq: 3, Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), Phase: record.PhaseThinking, Elapsed: 2 * time.Second})
	want := `{"id":"5-0","type":"phase","task_id":"t","otid":"","run_id":"","message_id":"","seq":3,"time":"2025-01-02T03:04:05Z","data":{"phase":"thinking","elapsed_ms":2000}}`
	if string(b) != want {
		t.Fatalf("JSON:\n got %s\nwant %s", b, want)
	}
}

// Entries written by something else (or a newer version) never break Read.
func TestRepliesReadLenient(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		err := b.rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.Key(rjConv), Values: []string{
			"type", "future_type", "task_id", "t", "seq", "x", "data", "{not json", "extra", "1"}}).Err()
		if err != nil {
			t.Fatal(err)
		}
		evs, _, err := r.Read(ctx, rjConv, "0", 0, 0)
		if err != nil || len(evs) != 1 || evs[0].Type != "future_type" || evs[0].TaskID != "t" || evs[0].Seq != 0 {
			t.Fatalf("Read = %+v, %v", evs, err)
		}
	})
}

// A head made from an earlier head of the conversation has the same arguments as one made
// afresh, and boxes only what changed: a turn's next head (its run id known now) makes the
// head, its slice and the run id's box.
func TestEventHeadSharesBoxes(t *testing.T) {
	r := NewReplies(nil, RepliesOptions{Prefix: "{p}:"})
	c := record.Conversation{Integration: "test", ChatID: "heads"}
	first := record.ReplyEvent{Type: record.EventPhase, TaskID: "t1", Otid: "o1", Phase: record.PhaseThinking}
	prev := r.newHead(c, &first, "", nil)
	for _, tc := range []struct {
		name   string
		ev     record.ReplyEvent
		marker string
	}{
		{"same", first, ""},
		{"run id", record.ReplyEvent{TaskID: "t1", Otid: "o1", RunID: "run-1"}, ""},
		{"message id", record.ReplyEvent{TaskID: "t1", Otid: "o1", RunID: "run-1", MessageID: "m-1"}, ""},
		{"marker", record.ReplyEvent{TaskID: "t1", Otid: "o1"}, r.answeredKey("t1")},
		{"task", record.ReplyEvent{TaskID: "t2", Otid: "o1"}, ""},
		{"otid", record.ReplyEvent{TaskID: "t1", Otid: "o2"}, ""},
	} {
		got := fmt.Sprintf("%#v", r.newHead(c, &tc.ev, tc.marker, prev).Args())
		if want := fmt.Sprintf("%#v", r.newHead(c, &tc.ev, tc.marker, nil).Args()); got != want {
			t.Errorf("%s: %s, want %s", tc.name, got, want)
		}
	}
	next := record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Otid: "o1", RunID: "run-1"}
	var sink *store.Head
	if n := testing.AllocsPerRun(100, func() { sink = r.newHead(c, &next, "", prev) }); n != 3 {
		t.Errorf("%v allocations for a head whose run id changed, want 3", n)
	}
	_ = sink
}

// prepareMany encodes ev for emitManyOp with no head to share (the turns'
// own path is progress.Queue.Prepare).
func (r *Replies) prepareMany(c record.Conversation, ev record.ReplyEvent, marker string) (*progress.Event, error) {
	pe := &progress.Event{}
	if err := r.prepareInto(pe, nil, c, ev, marker); err != nil {
		return nil, err
	}
	return pe, nil
}

// prepareInto encodes ev into pe as the writer does (progress.Encode with
// r's completion), sharing *last when it fits.
func (r *Replies) prepareInto(pe *progress.Event, last **store.Head, c record.Conversation, ev record.ReplyEvent, marker string) error {
	return progress.Encode(r.st, r.complete, pe, last, c, ev, marker)
}

// emitManyOp writes evs in one call of store.ReplyEmitMany, as the writer's
// round trips do.
func (r *Replies) emitManyOp(evs []*progress.Event, args *store.ArgArena) store.Op {
	return store.EmitManyOp(r.st, evs, args)
}

// newHead returns the head of ev with marker, for conversation c (see
// store.Replies.NewHead: prev's boxes serve where they are the same).
func (r *Replies) newHead(c record.Conversation, ev *record.ReplyEvent, marker string, prev *store.Head) *store.Head {
	return r.st.NewHead(c.Integration, c.ChatID, ev.TaskID, ev.Otid, ev.RunID, ev.MessageID, marker, prev)
}

// appendHead is pe's head (its keys and the fields before time).
func appendHead(pe *progress.Event) *store.Head {
	h, _, _, _ := pe.Encoded()
	return h
}

// appendArgs appends pe's ARGV of store.ReplyEmitMany to args: the flag, the
// type, the head's pairs, time and data.
func appendArgs(pe *progress.Event, args []any) []any {
	h, _, _, _ := pe.Encoded()
	return store.AppendEventArgs(args, h, pe)
}
