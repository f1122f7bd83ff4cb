package progress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// A write that blocks (Redis slow or down) never blocks the producer; events are written in
// order; flush waits for them; close drops the rest and leaves no goroutine behind.
func TestProgressWritesInOrderOffTheProducer(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "order"}
		var failed atomic.Int64
		p := wr.NewQueue(conv, func(error) { failed.Add(1) }, nil)
		pushed := make(chan struct{})
		go func() {
			for i := range 10 {
				p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
			}
			close(pushed)
		}()
		select {
		case <-pushed:
		case <-time.After(5 * time.Second):
			t.Fatal("push blocked on a blocked write")
		}
		close(gate)
		p.Flush(context.Background())
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[0 1 2 3 4 5 6 7 8 9]" {
			t.Fatalf("written %v", got)
		}
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: "10"})
		p.Flush(context.Background())
		if n := p.Close(); n != 0 {
			t.Fatalf("dropped %d", n)
		}
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: "after close"})
		p.Flush(context.Background())
		if got := streamTexts(t, r, conv); len(got) != 11 || failed.Load() != 0 {
			t.Fatalf("written after close: %v (failed %d)", got, failed.Load())
		}
	})
}

// While Redis is down the waiting events are bounded: phase events go first, the rest keep
// their order.
func TestProgressBoundDropsPhasesFirst(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "bound"}
		p := wr.NewQueue(conv, func(error) {}, nil)
		// The first event is taken by the writer and blocks in its round trip; the rest wait.
		p.Push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseThinking})
		waitTaken(wr, p)
		for i := range progressMax + 50 {
			if i%2 == 0 {
				// A phase that a later event does not replace (see TestWaitingPhasesAreSuperseded).
				p.Push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseAwaitingApproval, Approval: &ApprovalEvent{RequestTaskID: "r"}})
			} else {
				p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
			}
		}
		wr.mu.Lock()
		waiting := len(p.queue)
		wr.mu.Unlock()
		if waiting > progressMax {
			t.Fatalf("%d events waiting, bound %d", waiting, progressMax)
		}
		close(gate)
		p.Flush(context.Background())
		dropped := p.Close()
		evs, _, err := r.Read(context.Background(), conv, "0", 10000, 0)
		if err != nil {
			t.Fatal(err)
		}
		deltas, last := 0, -1
		for _, ev := range evs {
			if ev.Type != EventAnswerDelta {
				continue
			}
			var n int
			fmt.Sscan(ev.Text, &n)
			if n <= last {
				t.Fatalf("deltas out of order: %d after %d", n, last)
			}
			last = n
			deltas++
		}
		if deltas != (progressMax+50)/2 {
			t.Errorf("%d of %d deltas written: phases must be dropped before any delta", deltas, (progressMax+50)/2)
		}
		if p.superseded != 0 {
			t.Errorf("%d phases superseded, want 0", p.superseded)
		}
		if dropped == 0 || len(evs)+dropped != progressMax+51 {
			t.Errorf("written %d + dropped %d != pushed %d", len(evs), dropped, progressMax+51)
		}
	})
}

// The writer serves many turns: what they queue while a round trip runs goes in the next one,
// every turn's events in order, their seq numbers per turn, a barrier's ops after the events
// queued before it, and a once-event written once.
func TestWriterBatchesTurnsInOrder(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, trips := gatedWriter(b, gate)
		const turns, each = 50, 6
		ps := make([]*Queue, turns)
		for i := range ps {
			ps[i] = wr.NewQueue(Conversation{Integration: "test", ChatID: fmt.Sprint("c", i%5)}, func(err error) { t.Error(err) }, nil)
		}
		// A first round trip blocks on the gate; everything pushed meanwhile waits.
		ps[0].Push(ReplyEvent{Type: EventPhase, TaskID: "task0", Phase: PhaseThinking})
		waitTaken(wr, ps[0])
		for i, p := range ps {
			for k := range each {
				p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: fmt.Sprint("task", i), Text: fmt.Sprint(i, ".", k)})
			}
		}
		done := make(chan error, turns)
		for i, p := range ps {
			go func() {
				key := b.Prefix + "barrier:" + fmt.Sprint(i)
				op := func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
					c := pl.Set(ctx, key, "1", time.Minute)
					return c.Err
				}
				pe, err := r.prepareMany(p.conv, ReplyEvent{Type: EventAnswer, TaskID: fmt.Sprint("task", i), Text: "final"}, r.answeredKey(fmt.Sprint("task", i)))
				if err != nil {
					done <- err
					return
				}
				if err := p.Do(context.Background(), []*Event{pe}, op); err != nil {
					done <- err
					return
				}
				want := int64(each + 1) // the deltas, then this
				if i == 0 {
					want++ // and the first phase event
				}
				if !pe.written || pe.seq != want {
					done <- fmt.Errorf("turn %d: final written %v seq %d", i, pe.written, pe.seq)
					return
				}
				done <- nil
			}()
		}
		// Let every barrier queue before the gate opens.
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			wr.mu.Lock()
			n := 0
			for _, p := range ps {
				n += len(p.queue)
			}
			wr.mu.Unlock()
			if n == turns*(each+2) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		close(gate)
		for range turns {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
		if n := trips.Load(); n != 2 {
			t.Errorf("%d round trips for %d turns, want 2 (the blocked one, then all the rest)", n, turns)
		}
		for c := range 5 {
			conv := Conversation{Integration: "test", ChatID: fmt.Sprint("c", c)}
			evs, _, err := r.Read(context.Background(), conv, "0", 10000, 0)
			if err != nil {
				t.Fatal(err)
			}
			next := map[string]int{}
			for _, ev := range evs {
				k := next[ev.TaskID]
				switch {
				case ev.Type == EventAnswer:
					if k != each {
						t.Fatalf("%s: final after %d deltas", ev.TaskID, k)
					}
					next[ev.TaskID] = -1
				case ev.Type == EventAnswerDelta:
					if k < 0 || ev.Text != fmt.Sprint(ev.TaskID[len("task"):], ".", k) {
						t.Fatalf("%s: delta %q at %d", ev.TaskID, ev.Text, k)
					}
					next[ev.TaskID] = k + 1
				}
			}
			for id, k := range next {
				if k != -1 {
					t.Errorf("%s: no final event (at %d)", id, k)
				}
			}
		}
		for i := range turns {
			if n, _ := b.RDB.Exists(context.Background(), b.Prefix+"barrier:"+fmt.Sprint(i)).Result(); n != 1 {
				t.Errorf("barrier op of turn %d not run", i)
			}
		}
		// Written once: a second final for the same task is refused.
		pe, _ := r.prepareMany(ps[1].conv, ReplyEvent{Type: EventAnswer, TaskID: "task1", Text: "again"}, r.answeredKey("task1"))
		if err := ps[1].Do(context.Background(), []*Event{pe}); err != nil || pe.written {
			t.Errorf("second final: written %v, err %v", pe.written, err)
		}
		for _, p := range ps {
			p.Close()
		}
	})
}

// Lazy events (heartbeats) wait up to lazyWindow so that those of many turns share a round trip;
// an event that cannot wait takes the waiting lazy ones along at once.
func TestLazyEventsShareARoundTrip(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		wr, r, trips := gatedWriter(b, nil)
		// A window no test outlasts: a flush that waited for it would hang.
		wr.lazyWait = time.Hour
		ps := make([]*Queue, 20)
		for i := range ps {
			ps[i] = wr.NewQueue(Conversation{Integration: "test", ChatID: fmt.Sprint("lazy", i)}, func(err error) { t.Error(err) }, nil)
		}
		for i, p := range ps {
			p.PushLazy(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
		}
		// A flush of a turn that queued nothing else does not wait for the window...
		for i, p := range ps {
			p.Flush(context.Background())
			if got := streamTexts(t, r, p.conv); len(got) != 1 {
				t.Fatalf("turn %d: %d events after flush", i, len(got))
			}
		}
		if n := trips.Load(); n != 1 {
			t.Errorf("20 lazy events in %d round trips, want 1", n)
		}
		// ...and lazy events alone are written within it, together.
		wr.mu.Lock()
		wr.lazyWait = lazyWindow
		if wr.lazyTimer != nil { // the hour's timer of the first round
			wr.lazyTimer.Stop()
			wr.lazyTimer = nil
		}
		wr.mu.Unlock()
		for i, p := range ps {
			p.PushLazy(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
		}
		deadline := time.Now().Add(10 * lazyWindow)
		for trips.Load() < 2 && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := trips.Load(); n != 2 {
			t.Fatalf("second lazy round: %d round trips in all, want 2", n)
		}
		for _, p := range ps {
			if got := streamTexts(t, r, p.conv); len(got) != 2 {
				t.Fatalf("%d events, want 2", len(got))
			}
			p.Close()
		}
	})
}

// testSaver is a turn's record for PushSave: it counts its encodes.
type testSaver struct {
	j       *Journal
	mu      sync.Mutex
	rec     TurnRecord
	encodes atomic.Int64
}

func (s *testSaver) set(runID string) {
	s.mu.Lock()
	s.rec.RunID = runID
	s.mu.Unlock()
}

func (s *testSaver) SaveOp() (store.Op, error) {
	s.encodes.Add(1)
	s.mu.Lock()
	rec := s.rec
	s.mu.Unlock()
	return s.j.saveOp(&rec)
}

// A journal save still waiting is replaced by a newer one (the newer record has everything)
// without being encoded, and dropped when the turn writes a newer record itself; the save the
// writer takes is encoded then, from the record as it is then, and written after the turn's
// earlier items and before its later ones.
func TestQueuedSavesAreReplaced(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		ctx := context.Background()
		gate := make(chan struct{})
		wr, _, _ := gatedWriter(b, gate)
		j := NewJournal(b.RDB, JournalOptions{Prefix: b.Prefix})
		s := &testSaver{j: j, rec: TurnRecord{TaskID: "t", Otid: "o"}}
		if err := j.Save(ctx, &s.rec); err != nil { // loads the script: no NOSCRIPT round trip below
			t.Fatal(err)
		}
		p := wr.NewQueue(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) }, nil)
		p.Push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr, p) // the writer blocks on the gate; what follows waits
		for i := range 3 {
			s.set(fmt.Sprint("run-", i))
			p.PushSave(s)
		}
		saves := 0
		wr.mu.Lock()
		for _, it := range p.queue {
			if it.save {
				saves++
			}
		}
		wr.mu.Unlock()
		if saves != 1 {
			t.Fatalf("%d saves waiting, want 1 (the newest)", saves)
		}
		if n := s.encodes.Load(); n != 0 {
			t.Fatalf("%d saves encoded before the writer took one", n)
		}
		s.set("run-3") // after the last push: the writer takes the record as it is
		// An op queued after the save runs after it: it sees the record.
		var seen string
		after := func(ctx context.Context, pl redis.Pipeliner, sha bool) func() error {
			c := pl.Get(ctx, j.recordKey("t"))
			return func() error {
				seen = c.Val()
				return c.Err()
			}
		}
		close(gate)
		if err := p.Do(ctx, nil, after); err != nil {
			t.Fatal(err)
		}
		if n := s.encodes.Load(); n != 1 {
			t.Fatalf("%d encodes, want 1", n)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-3" {
			t.Fatalf("journal %+v %v, want run-3", rec, err)
		}
		if !strings.Contains(seen, `"run_id":"run-3"`) {
			t.Fatalf("the op after the save read %q", seen)
		}
		p.Close()
		// Dropped before the writer takes it: never encoded, never written.
		gate2 := make(chan struct{})
		wr2, _, _ := gatedWriter(b, gate2)
		p2 := wr2.NewQueue(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) }, nil)
		p2.Push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr2, p2)
		s.set("run-4")
		p2.PushSave(s)
		p2.DropQueuedSaves()
		close(gate2)
		p2.Flush(ctx)
		if n := s.encodes.Load(); n != 1 {
			t.Fatalf("%d encodes, want 1: the dropped save was encoded", n)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-3" {
			t.Fatalf("journal %+v %v: the dropped save was written", rec, err)
		}
		p2.Close()
	})
}

// A queued save waits: the progress events queued after it go without it (an instant turn's
// intermediate saves are replaced by its end's save, not written each); it is written with the
// turn's next write that is waited for (a flush: the send's intent goes so), or once the
// window has passed since it was queued; a queue closed with a save waiting writes nothing.
func TestQueuedSaveWaitsForAWaitedWrite(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		ctx := context.Background()
		wr, r, trips := gatedWriter(b, nil)
		wr.lazyWait = time.Hour // a window no test outlasts
		j := NewJournal(b.RDB, JournalOptions{Prefix: b.Prefix})
		s := &testSaver{j: j, rec: TurnRecord{TaskID: "t", Otid: "o", RunID: "run-1"}}
		conv := Conversation{Integration: "test", ChatID: "waits"}
		p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		p.PushSave(s)
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "a"})
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "b"})
		deadline := time.Now().Add(10 * time.Second)
		for len(streamTexts(t, r, conv)) < 2 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[a b]" {
			t.Fatalf("written %v", got)
		}
		if n := s.encodes.Load(); n != 0 {
			t.Fatalf("the save went with the events (%d encodes)", n)
		}
		if _, err := j.Get(ctx, "t"); err == nil {
			t.Fatal("the waiting save was written")
		}
		p.Flush(ctx)
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-1" {
			t.Fatalf("after the flush: journal %+v %v, want run-1", rec, err)
		}
		p.Close()

		// Within the window: written by its timer, with nothing else queued.
		wr.mu.Lock()
		wr.lazyWait = 20 * time.Millisecond
		wr.mu.Unlock()
		p2 := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		before := trips.Load()
		s.set("run-2")
		p2.PushSave(s)
		for trips.Load() == before && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-2" {
			t.Fatalf("after the window: journal %+v %v, want run-2", rec, err)
		}
		p2.Close()

		// Closed while it waits: dropped, its timer stopped.
		wr.mu.Lock()
		wr.lazyWait = time.Hour
		wr.mu.Unlock()
		p3 := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		s.set("run-3")
		p3.PushSave(s)
		p3.Close()
		wr.mu.Lock()
		timer := p3.sw.timer
		wr.mu.Unlock()
		if timer != nil {
			t.Fatal("the closed queue's save timer is still armed")
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-2" {
			t.Fatalf("after close: journal %+v %v, want run-2", rec, err)
		}
	})
}

// A queued save that cannot be encoded goes to failed, and the turn's other writes go on.
func TestQueuedSaveEncodeFailure(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		wr, r, _ := gatedWriter(b, nil)
		j := NewJournal(b.RDB, JournalOptions{Prefix: b.Prefix})
		s := &testSaver{j: j} // no task id: refused
		failed := make(chan error, 1)
		conv := Conversation{Integration: "test", ChatID: "badsave"}
		p := wr.NewQueue(conv, func(err error) { failed <- err }, nil)
		p.PushSave(s)
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "after"})
		p.Flush(context.Background())
		select {
		case err := <-failed:
			if !strings.Contains(err.Error(), "no task id") {
				t.Fatalf("failed with %v", err)
			}
		case <-time.After(5 * time.Second): // failed is called once the flush's barrier is done
			t.Fatal("the failed save was not reported")
		}
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[after]" {
			t.Fatalf("written %v", got)
		}
		p.Close()
	})
}

// A phase that only says what the turn is doing is replaced by the turn's next event while it
// still waits for the writer (under load an instant turn's connecting, streaming and thinking
// never reach Redis); a phase that carries an approval, an answer delta, a tool event are never
// replaced; a replaced heartbeat is free for the next beat; the turn's events keep their order.
func TestWaitingPhasesAreSuperseded(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "supersede"}
		p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		ph := func(phase ReplyPhase) ReplyEvent { return ReplyEvent{Type: EventPhase, TaskID: "t", Phase: phase} }
		// The first event is taken and blocks in its round trip; the rest wait.
		p.Push(ph(PhaseConnecting))
		waitTaken(wr, p)
		p.Push(ph(PhaseConnecting))
		p.Push(ph(PhaseStreaming))
		p.PushLazy(ph(PhaseStreaming)) // a heartbeat: replaces the waiting streaming
		beat := p.beat
		p.Push(ph(PhaseThinking)) // replaces the heartbeat, which is free again
		wr.mu.Lock()
		if beat == nil || beat.busy {
			t.Errorf("the superseded heartbeat is still busy")
		}
		wr.mu.Unlock()
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "hm", Narration: true})
		p.Push(ph(PhaseStreaming)) // replaced by the next delta (the narration before it stays)
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "hel"})
		p.Push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseAwaitingApproval,
			Approval: &ApprovalEvent{RequestTaskID: "req"}})
		p.Push(ph(PhaseThinking)) // does not replace the approval's phase
		final, err := r.prepareMany(conv, ReplyEvent{Type: EventAnswer, TaskID: "t", Text: "hello"}, r.answeredKey("t"))
		if err != nil {
			t.Fatal(err)
		}
		evs := finishGated(t, wr, p, r, conv, gate, final) // (it replaced the waiting thinking)
		var got []string
		for _, ev := range evs {
			s := string(ev.Type)
			if ev.Phase != "" {
				s += ":" + string(ev.Phase)
			}
			if ev.Text != "" {
				s += ":" + ev.Text
			}
			got = append(got, s)
		}
		want := []string{"phase:connecting", "answer_delta:hm", "answer_delta:hel",
			"phase:awaiting_approval", "answer:hello"}
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Fatalf("written %q\nwant    %q", got, want)
		}
		for i := 1; i < len(evs); i++ {
			if evs[i].Seq <= evs[i-1].Seq {
				t.Errorf("seq %d after %d", evs[i].Seq, evs[i-1].Seq)
			}
		}
		if p.superseded != 6 || p.dropped != 0 {
			t.Errorf("superseded %d dropped %d, want 6 and 0", p.superseded, p.dropped)
		}
	})
}

// finishGated queues final behind what p queued while its writer waits for gate, opens the
// gate, waits for final to be written, closes p and returns conv's stream.
func finishGated(t *testing.T, wr *Writer, p *Queue, r *Replies, conv Conversation, gate chan struct{}, final *Event) []ReplyEvent {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.Do(context.Background(), []*Event{final}) }()
	waitQueued(wr, p, final)
	close(gate)
	if err := <-done; err != nil || !final.written {
		t.Fatalf("final: %v, written %v", err, final.written)
	}
	p.Close()
	evs, _, err := r.Read(context.Background(), conv, "0", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitQueued returns once pe waits in p's queue.
func waitQueued(wr *Writer, p *Queue, pe *Event) {
	for {
		wr.mu.Lock()
		for _, it := range p.queue {
			if it.ev == pe {
				wr.mu.Unlock()
				return
			}
		}
		wr.mu.Unlock()
		time.Sleep(time.Millisecond)
	}
}

// BenchmarkQueuedSaves: an instant turn's saveLater at its start and at its
// run id, the second replacing the first before the writer takes it, then a
// round trip (not sent: only the work on the worker's side counts). Old:
// each save encoded when pushed; new: when the writer takes it.
func BenchmarkQueuedSaves(b *testing.B) {
	j := NewJournal(nil, JournalOptions{})
	wr := newWriter(nil, NewReplies(nil, RepliesOptions{}))
	wr.Exec = func(ctx context.Context, ops []store.Op) []error { return make([]error, len(ops)) }
	rec := &TurnRecord{TaskID: "01JDXQ7Z8K3M4N5P6Q7R8S9T0V", Otid: "otid-01JDXQ7Z8K3M4N5P6Q7R8S9T0V",
		AgentID: "agent-3f1c2b7e-8d4a-4f2e-9c1d-5b6a7e8f9a0b", Conversation: Conversation{Integration: "telegram", ChatID: "123456789"},
		MessageID: "msg-42", Queue: "default", ThreadMode: "agent", EnqueuedAt: time.Now()}
	s := &testSaver{j: j, rec: *rec}
	for _, old := range []bool{true, false} {
		name := "encode when taken"
		if old {
			name = "encode at push"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			p := wr.NewQueue(Conversation{Integration: "bench", ChatID: "saves"}, func(err error) { b.Error(err) }, nil)
			wr.mu.Lock() // the writer waits until both saves are queued
			for b.Loop() {
				for _, run := range []string{"", "run-1"} {
					s.set(run)
					if old {
						op, err := s.SaveOp()
						p.queue = append(p.queue, item{rec: EncodedSave{op, err}, save: true})
						continue
					}
					p.dropSavesLocked()
					p.queue = append(p.queue, item{rec: s, save: true})
				}
				if old {
					p.queue = p.queue[1:] // the newer replaces it (PushSave)
				}
				p.scheduleLocked()
				wr.mu.Unlock()
				p.Flush(context.Background())
				wr.mu.Lock()
			}
			wr.mu.Unlock()
			p.Close()
		})
	}
}

// A turn's queue lets go of what a burst grew once the writer took it: a
// waiting turn holds one slot (see progressKeep).
func TestProgressKeepsOneSlot(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		wr, r, _ := gatedWriter(b, nil)
		conv := Conversation{Integration: "test", ChatID: "keep"}
		p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		defer p.Close()
		for i := range 3 {
			p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
		}
		p.Flush(context.Background())
		wr.mu.Lock()
		held := cap(p.queue)
		wr.mu.Unlock()
		if held > 1 {
			t.Errorf("after a burst of 3 the turn's queue holds %d slots, want at most 1", held)
		}
		p.Push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseThinking})
		waitTaken(wr, p)
		wr.mu.Lock()
		held = cap(p.queue)
		wr.mu.Unlock()
		if held != 1 {
			t.Errorf("after one event the turn's queue holds %d slots, want 1 (kept for the next)", held)
		}
		p.Flush(context.Background())
		if got := streamTexts(t, r, conv); len(got) != 4 {
			t.Errorf("written %d events, want 4", len(got))
		}
	})
}

// When a caller stops waiting for its writes (its context ended), doThen still learns how
// they ended: written after all, or dropped when the attempt closes its queue before the
// writer took them (no goroutine is left waiting).
func TestDoThenReportsLateWrites(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		for _, closeFirst := range []bool{false, true} {
			gate := make(chan struct{})
			wr, r, _ := gatedWriter(b, gate)
			conv := Conversation{Integration: "test", ChatID: fmt.Sprint("late-", closeFirst)}
			p := wr.NewQueue(conv, func(error) {}, nil)
			// The writer takes this event and blocks in its round trip: what follows waits.
			p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "a"})
			waitTaken(wr, p)
			final, err := r.prepareMany(conv, ReplyEvent{Type: EventAnswer, TaskID: "t", Text: "late"}, r.answeredKey("t"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			got := make(chan error, 1)
			err = p.DoThen(ctx, func(err error) { got <- err }, []*Event{final})
			if !errors.Is(err, ErrNotWaited) {
				t.Fatalf("doThen with an ended context: %v, want ErrNotWaited", err)
			}
			if closeFirst {
				p.Close() // the attempt ends before the writer took the final event
			}
			close(gate)
			select {
			case err := <-got:
				switch {
				case closeFirst && (!errors.Is(err, ErrWritesDropped) || final.written):
					t.Errorf("dropped: then(%v), written %v; want ErrWritesDropped, false", err, final.written)
				case !closeFirst && (err != nil || !final.written):
					t.Errorf("late: then(%v), written %v; want nil, true", err, final.written)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("then never ran (close first: %v)", closeFirst)
			}
			if !closeFirst {
				p.Close()
				if ok, _ := r.Answered(context.Background(), "t"); !ok {
					t.Error("the late final event left no answered marker")
				}
			}
			p.Flush(context.Background())
			b.RDB.Del(context.Background(), r.answeredKey("t"))
		}
	})
}

// A turn's events that share a round trip share one script call, which reads and writes the
// turn's emitted entry (what makes each write idempotent) once for the writer, not once per
// event: the entry holds the last event's number, id and seq all the same, and the call sent
// again writes nothing twice. Counted with MONITOR on a real Redis.
func TestEventsOfACallWriteTheirEntryOnce(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		ctx := context.Background()
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "entry"}
		p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		defer p.Close()
		emitted := b.Prefix + "emitted:t"
		var lines []string
		var lmu sync.Mutex
		if b.Srv.Real {
			// MONITOR on a connection of its own, read line by line.
			conn, err := net.Dial("tcp", b.Srv.Addr)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := conn.Write([]byte("MONITOR\r\n")); err != nil {
				t.Fatal(err)
			}
			rd := bufio.NewReader(conn)
			if l, err := rd.ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
				t.Fatalf("MONITOR: %q %v", l, err)
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				for {
					l, err := rd.ReadString('\n')
					if err != nil {
						return // the connection closed
					}
					if strings.Contains(l, emitted) {
						lmu.Lock()
						lines = append(lines, l)
						lmu.Unlock()
					}
				}
			}()
			defer func() { _ = conn.Close(); <-done }()
		}
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "a"})
		waitTaken(wr, p) // its round trip waits at the gate: what follows shares the next
		for _, s := range []string{"b", "c", "d"} {
			p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: s})
		}
		close(gate)
		p.Flush(ctx)
		evs, _, err := r.Read(ctx, conv, "0", 100, 0)
		if err != nil || len(evs) != 4 {
			t.Fatalf("%d events, %v", len(evs), err)
		}
		entry, err := b.RDB.HGetAll(ctx, emitted).Result()
		if err != nil || len(entry) != 1 {
			t.Fatalf("emitted %v %v", entry, err)
		}
		for _, v := range entry {
			if want := fmt.Sprintf("4 %s %d", evs[3].ID, evs[3].Seq); v != want {
				t.Fatalf("entry %q, want %q", v, want)
			}
		}
		if !b.Srv.Real {
			return
		}
		time.Sleep(50 * time.Millisecond) // MONITOR's lines arrive
		lmu.Lock()
		defer lmu.Unlock()
		count := func(cmd string) (n int) {
			for _, l := range lines {
				if strings.Contains(l, `"`+cmd+`" "`+emitted+`"`) {
					n++
				}
			}
			return n
		}
		// Two calls (the first event alone, then the three): one HGET and one HSET each.
		if hg, hs := count("HGET"), count("HSET"); hg != 2 || hs != 2 {
			t.Errorf("HGET %d, HSET %d of the emitted entry in two calls, want 2 and 2:\n%s", hg, hs, strings.Join(lines, "\n"))
		}
	})
}
