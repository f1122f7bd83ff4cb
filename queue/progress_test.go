package queue

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// gatedWriter is a writer on b whose round trips wait for gate (Redis slow or down) and are
// counted.
func gatedWriter(b rjBackend, gate chan struct{}) (*writer, *Replies, *atomic.Int64) {
	r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
	wr := newWriter(b.rdb, r)
	var trips atomic.Int64
	wr.exec = func(ctx context.Context, ops []pipelineOp) []error {
		if gate != nil {
			<-gate
		}
		defer trips.Add(1) // counted once written
		return runOps(ctx, b.rdb, ops)
	}
	return wr, r, &trips
}

// ignoreMiniredis ignores miniredis's server side of the test's connections.
var ignoreMiniredis = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
	goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"),
}

// waitTaken returns once the writer took what p queued.
func waitTaken(wr *writer, p *progress) {
	for {
		wr.mu.Lock()
		taken := len(p.queue) == 0
		wr.mu.Unlock()
		if taken {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func streamTexts(t *testing.T, r *Replies, c Conversation) []string {
	t.Helper()
	evs, _, err := r.Read(context.Background(), c, "0", 10000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Text)
	}
	return out
}

// A write that blocks (Redis slow or down) never blocks the producer; events are written in
// order; flush waits for them; close drops the rest and leaves no goroutine behind.
func TestProgressWritesInOrderOffTheProducer(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "order"}
		var failed atomic.Int64
		p := wr.newProgress(conv, func(error) { failed.Add(1) })
		pushed := make(chan struct{})
		go func() {
			for i := range 10 {
				p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
			}
			close(pushed)
		}()
		select {
		case <-pushed:
		case <-time.After(5 * time.Second):
			t.Fatal("push blocked on a blocked write")
		}
		close(gate)
		p.flush(context.Background())
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[0 1 2 3 4 5 6 7 8 9]" {
			t.Fatalf("written %v", got)
		}
		p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: "10"})
		p.flush(context.Background())
		if n := p.close(); n != 0 {
			t.Fatalf("dropped %d", n)
		}
		p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: "after close"})
		p.flush(context.Background())
		if got := streamTexts(t, r, conv); len(got) != 11 || failed.Load() != 0 {
			t.Fatalf("written after close: %v (failed %d)", got, failed.Load())
		}
	})
}

// While Redis is down the waiting events are bounded: phase events go first, the rest keep
// their order.
func TestProgressBoundDropsPhasesFirst(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "bound"}
		p := wr.newProgress(conv, func(error) {})
		// The first event is taken by the writer and blocks in its round trip; the rest wait.
		p.push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseThinking})
		waitTaken(wr, p)
		for i := range progressMax + 50 {
			if i%2 == 0 {
				p.push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseThinking})
			} else {
				p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
			}
		}
		wr.mu.Lock()
		waiting := len(p.queue)
		wr.mu.Unlock()
		if waiting > progressMax {
			t.Fatalf("%d events waiting, bound %d", waiting, progressMax)
		}
		close(gate)
		p.flush(context.Background())
		dropped := p.close()
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
		if dropped == 0 || len(evs)+dropped != progressMax+51 {
			t.Errorf("written %d + dropped %d != pushed %d", len(evs), dropped, progressMax+51)
		}
	})
}

// The writer serves many turns: what they queue while a round trip runs goes in the next one,
// every turn's events in order, their seq numbers per turn, a barrier's ops after the events
// queued before it, and a once-event written once.
func TestWriterBatchesTurnsInOrder(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		gate := make(chan struct{})
		wr, r, trips := gatedWriter(b, gate)
		const turns, each = 50, 6
		ps := make([]*progress, turns)
		for i := range ps {
			ps[i] = wr.newProgress(Conversation{Integration: "test", ChatID: fmt.Sprint("c", i%5)}, func(err error) { t.Error(err) })
		}
		// A first round trip blocks on the gate; everything pushed meanwhile waits.
		ps[0].push(ReplyEvent{Type: EventPhase, TaskID: "task0", Phase: PhaseThinking})
		waitTaken(wr, ps[0])
		for i, p := range ps {
			for k := range each {
				p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: fmt.Sprint("task", i), Text: fmt.Sprint(i, ".", k)})
			}
		}
		done := make(chan error, turns)
		for i, p := range ps {
			go func() {
				key := b.prefix + "barrier:" + fmt.Sprint(i)
				op := func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
					c := pl.Set(ctx, key, "1", time.Minute)
					return c.Err
				}
				pe, err := r.prepareMany(p.conv, ReplyEvent{Type: EventAnswer, TaskID: fmt.Sprint("task", i), Text: "final"}, r.answeredKey(fmt.Sprint("task", i)))
				if err != nil {
					done <- err
					return
				}
				if err := p.do(context.Background(), []*preparedEvent{pe}, op); err != nil {
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
			if n, _ := b.rdb.Exists(context.Background(), b.prefix+"barrier:"+fmt.Sprint(i)).Result(); n != 1 {
				t.Errorf("barrier op of turn %d not run", i)
			}
		}
		// Written once: a second final for the same task is refused.
		pe, _ := r.prepareMany(ps[1].conv, ReplyEvent{Type: EventAnswer, TaskID: "task1", Text: "again"}, r.answeredKey("task1"))
		if err := ps[1].do(context.Background(), []*preparedEvent{pe}); err != nil || pe.written {
			t.Errorf("second final: written %v, err %v", pe.written, err)
		}
		for _, p := range ps {
			p.close()
		}
	})
}

// A script Redis does not have (SCRIPT FLUSH, a restarted Redis) is sent again as EVAL, in
// order.
func TestRunOpsAfterScriptFlush(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		ctx := context.Background()
		if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Skip("SCRIPT FLUSH:", err)
		}
		conv := Conversation{Integration: "test", ChatID: "flush"}
		var evs []*preparedEvent
		for i := range 3 {
			pe, err := r.prepareMany(conv, ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: fmt.Sprint(i)}, "")
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, pe)
		}
		save, err := j.saveOp(&TurnRecord{TaskID: "t", Otid: "o"}, false)
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range runOps(ctx, b.rdb, []pipelineOp{r.emitManyOp(evs[:2], nil), save, r.emitManyOp(evs[2:], nil)}) {
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[0 1 2]" {
			t.Errorf("stream %s", got)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.Otid != "o" {
			t.Errorf("journal: %v %v", rec, err)
		}
	})
}

// Lazy events (heartbeats) wait up to lazyWindow so that those of many turns share a round trip;
// an event that cannot wait takes the waiting lazy ones along at once.
func TestLazyEventsShareARoundTrip(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		wr, r, trips := gatedWriter(b, nil)
		ps := make([]*progress, 20)
		for i := range ps {
			ps[i] = wr.newProgress(Conversation{Integration: "test", ChatID: fmt.Sprint("lazy", i)}, func(err error) { t.Error(err) })
		}
		start := time.Now()
		for i, p := range ps {
			p.pushLazy(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
		}
		// A flush of a turn that queued nothing else does not wait for the window...
		for i, p := range ps {
			p.flush(context.Background())
			if got := streamTexts(t, r, p.conv); len(got) != 1 {
				t.Fatalf("turn %d: %d events after flush", i, len(got))
			}
		}
		if n := trips.Load(); n != 1 {
			t.Errorf("20 lazy events in %d round trips, want 1", n)
		}
		if d := time.Since(start); d >= lazyWindow {
			t.Errorf("flush waited %v for the lazy window", d)
		}
		// ...and lazy events alone are written within it, together.
		for i, p := range ps {
			p.pushLazy(ReplyEvent{Type: EventPhase, TaskID: fmt.Sprint("t", i), Phase: PhaseThinking})
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
			p.close()
		}
	})
}

// A journal save still waiting is replaced by a newer one (the newer record has everything),
// and dropped when the turn writes a newer record itself.
func TestQueuedSavesAreReplaced(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		gate := make(chan struct{})
		wr, _, _ := gatedWriter(b, gate)
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		p := wr.newProgress(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) })
		p.push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr, p) // the writer blocks on the gate; what follows waits
		saves := 0
		for i := range 3 {
			op, err := j.saveOp(&TurnRecord{TaskID: "t", Otid: "o", RunID: fmt.Sprint("run-", i)}, false)
			if err != nil {
				t.Fatal(err)
			}
			p.pushSave(op)
		}
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
		close(gate)
		p.flush(context.Background())
		if rec, err := j.Get(context.Background(), "t"); err != nil || rec.RunID != "run-2" {
			t.Fatalf("journal %+v %v, want run-2", rec, err)
		}
		p.close()
		// Dropped before the writer takes it: never written.
		gate2 := make(chan struct{})
		wr2, _, _ := gatedWriter(b, gate2)
		p2 := wr2.newProgress(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) })
		p2.push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr2, p2)
		op, _ := j.saveOp(&TurnRecord{TaskID: "t", Otid: "o", RunID: "run-3"}, false)
		p2.pushSave(op)
		p2.dropQueuedSaves()
		close(gate2)
		p2.flush(context.Background())
		if rec, err := j.Get(context.Background(), "t"); err != nil || rec.RunID != "run-2" {
			t.Fatalf("journal %+v %v: the dropped save was written", rec, err)
		}
		p2.close()
	})
}

// A save that keeps finished records writes nothing over an answered one (an attempt that does
// not know whether its finish reached Redis journals its retry that way); it writes over the rest.
func TestSaveKeepsFinishedRecords(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		run := func(rec *TurnRecord) {
			op, err := j.saveOp(rec, true)
			if err != nil {
				t.Fatal(err)
			}
			if errs := runOps(ctx, b.rdb, []pipelineOp{op}); errs[0] != nil {
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

// A turn's queue lets go of what a burst grew once the writer took it: a
// waiting turn holds one slot (see progressKeep).
func TestProgressKeepsOneSlot(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		wr, r, _ := gatedWriter(b, nil)
		conv := Conversation{Integration: "test", ChatID: "keep"}
		p := wr.newProgress(conv, func(err error) { t.Error(err) })
		defer p.close()
		for i := range 3 {
			p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t1", Text: fmt.Sprint(i)})
		}
		p.flush(context.Background())
		wr.mu.Lock()
		held := cap(p.queue)
		wr.mu.Unlock()
		if held > 1 {
			t.Errorf("after a burst of 3 the turn's queue holds %d slots, want at most 1", held)
		}
		p.push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseThinking})
		waitTaken(wr, p)
		wr.mu.Lock()
		held = cap(p.queue)
		wr.mu.Unlock()
		if held != 1 {
			t.Errorf("after one event the turn's queue holds %d slots, want 1 (kept for the next)", held)
		}
		p.flush(context.Background())
		if got := streamTexts(t, r, conv); len(got) != 4 {
			t.Errorf("written %d events, want 4", len(got))
		}
	})
}
