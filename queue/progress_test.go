package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"
)

// gatedWriter is a writer on b whose round trips wait for gate (Redis slow or down) and are
// counted.
func gatedWriter(b rjBackend, gate chan struct{}) (*writer, *Replies, *atomic.Int64) {
	r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
	wr := newWriter(b.rdb, r)
	var trips atomic.Int64
	wr.exec = func(ctx context.Context, ops []store.Op) []error {
		if gate != nil {
			<-gate
		}
		defer trips.Add(1) // counted once written
		return store.Run(ctx, b.rdb, ops)
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
				// A phase that a later event does not replace (see TestWaitingPhasesAreSuperseded).
				p.push(ReplyEvent{Type: EventPhase, TaskID: "t1", Phase: PhaseAwaitingApproval, Approval: &ApprovalEvent{RequestTaskID: "r"}})
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
// order. (On miniredis only: a flush of the shared Redis would make another package's test,
// running at the same time, meet NOSCRIPT, and one that counts round trips fail.)
func TestRunOpsAfterScriptFlush(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		if b.srv.Mini == nil {
			t.Skip("not on the shared Redis: see the test's comment")
		}
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
		save, err := j.saver.SaveOp(&TurnRecord{TaskID: "t", Otid: "o"}, false, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range store.Run(ctx, b.rdb, []store.Op{r.emitManyOp(evs[:2], nil), save, r.emitManyOp(evs[2:], nil)}) {
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
		// A window no test outlasts: a flush that waited for it would hang.
		wr.lazyWait = time.Hour
		ps := make([]*progress, 20)
		for i := range ps {
			ps[i] = wr.newProgress(Conversation{Integration: "test", ChatID: fmt.Sprint("lazy", i)}, func(err error) { t.Error(err) })
		}
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
		// ...and lazy events alone are written within it, together.
		wr.mu.Lock()
		wr.lazyWait = lazyWindow
		if wr.lazyTimer != nil { // the hour's timer of the first round
			wr.lazyTimer.Stop()
			wr.lazyTimer = nil
		}
		wr.mu.Unlock()
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

// testSaver is a turn's record for pushSave: it counts its encodes.
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

func (s *testSaver) saveOp() (store.Op, error) {
	s.encodes.Add(1)
	s.mu.Lock()
	rec := s.rec
	s.mu.Unlock()
	return s.j.saver.SaveOp(&rec, false, 0, nil)
}

// A journal save still waiting is replaced by a newer one (the newer record has everything)
// without being encoded, and dropped when the turn writes a newer record itself; the save the
// writer takes is encoded then, from the record as it is then, and written after the turn's
// earlier items and before its later ones.
func TestQueuedSavesAreReplaced(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		gate := make(chan struct{})
		wr, _, _ := gatedWriter(b, gate)
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		s := &testSaver{j: j, rec: TurnRecord{TaskID: "t", Otid: "o"}}
		if err := j.Save(ctx, &s.rec); err != nil { // loads the script: no NOSCRIPT round trip below
			t.Fatal(err)
		}
		p := wr.newProgress(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) })
		p.push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr, p) // the writer blocks on the gate; what follows waits
		for i := range 3 {
			s.set(fmt.Sprint("run-", i))
			p.pushSave(s)
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
		if err := p.do(ctx, nil, after); err != nil {
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
		p.close()
		// Dropped before the writer takes it: never encoded, never written.
		gate2 := make(chan struct{})
		wr2, _, _ := gatedWriter(b, gate2)
		p2 := wr2.newProgress(Conversation{Integration: "test", ChatID: "saves"}, func(err error) { t.Error(err) })
		p2.push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		waitTaken(wr2, p2)
		s.set("run-4")
		p2.pushSave(s)
		p2.dropQueuedSaves()
		close(gate2)
		p2.flush(ctx)
		if n := s.encodes.Load(); n != 1 {
			t.Fatalf("%d encodes, want 1: the dropped save was encoded", n)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.RunID != "run-3" {
			t.Fatalf("journal %+v %v: the dropped save was written", rec, err)
		}
		p2.close()
	})
}

// A queued save that cannot be encoded goes to failed, and the turn's other writes go on.
func TestQueuedSaveEncodeFailure(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		wr, r, _ := gatedWriter(b, nil)
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		s := &testSaver{j: j} // no task id: refused
		failed := make(chan error, 1)
		conv := Conversation{Integration: "test", ChatID: "badsave"}
		p := wr.newProgress(conv, func(err error) { failed <- err })
		p.pushSave(s)
		p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "after"})
		p.flush(context.Background())
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
		p.close()
	})
}

// A save that keeps finished records writes nothing over an answered one (an attempt that does
// not know whether its finish reached Redis journals its retry that way); it writes over the rest.
func TestSaveKeepsFinishedRecords(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		ctx := context.Background()
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		run := func(rec *TurnRecord) {
			op, err := j.saver.SaveOp(rec, true, 0, nil)
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

// A phase that only says what the turn is doing is replaced by the turn's next event while it
// still waits for the writer (under load an instant turn's connecting, streaming and thinking
// never reach Redis); a phase that carries an approval, an answer delta, a tool event are never
// replaced; a replaced heartbeat is free for the next beat; the turn's events keep their order.
func TestWaitingPhasesAreSuperseded(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		gate := make(chan struct{})
		wr, r, _ := gatedWriter(b, gate)
		conv := Conversation{Integration: "test", ChatID: "supersede"}
		p := wr.newProgress(conv, func(err error) { t.Error(err) })
		ph := func(phase ReplyPhase) ReplyEvent { return ReplyEvent{Type: EventPhase, TaskID: "t", Phase: phase} }
		// The first event is taken and blocks in its round trip; the rest wait.
		p.push(ph(PhaseConnecting))
		waitTaken(wr, p)
		p.push(ph(PhaseConnecting))
		p.push(ph(PhaseStreaming))
		p.pushLazy(ph(PhaseStreaming)) // a heartbeat: replaces the waiting streaming
		beat := p.beat
		p.push(ph(PhaseThinking)) // replaces the heartbeat, which is free again
		wr.mu.Lock()
		if beat == nil || beat.busy {
			t.Errorf("the superseded heartbeat is still busy")
		}
		wr.mu.Unlock()
		p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "hm", Narration: true})
		p.push(ph(PhaseStreaming)) // replaced by the next delta (the narration before it stays)
		p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "hel"})
		p.push(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseAwaitingApproval,
			Approval: &ApprovalEvent{RequestTaskID: "req"}})
		p.push(ph(PhaseThinking)) // does not replace the approval's phase
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
func finishGated(t *testing.T, wr *writer, p *progress, r *Replies, conv Conversation, gate chan struct{}, final *preparedEvent) []ReplyEvent {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.do(context.Background(), []*preparedEvent{final}) }()
	waitQueued(wr, p, final)
	close(gate)
	if err := <-done; err != nil || !final.written {
		t.Fatalf("final: %v, written %v", err, final.written)
	}
	p.close()
	evs, _, err := r.Read(context.Background(), conv, "0", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

// waitQueued returns once pe waits in p's queue.
func waitQueued(wr *writer, p *progress, pe *preparedEvent) {
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
	wr.exec = func(ctx context.Context, ops []store.Op) []error { return make([]error, len(ops)) }
	rec := benchTurnRecord()
	rec.Outcome, rec.FinishedAt, rec.Usage = "", time.Time{}, nil
	s := &testSaver{j: j, rec: *rec}
	for _, old := range []bool{true, false} {
		name := "encode when taken"
		if old {
			name = "encode at push"
		}
		b.Run(name, func(b *testing.B) {
			b.ReportAllocs()
			p := wr.newProgress(Conversation{Integration: "bench", ChatID: "saves"}, func(err error) { b.Error(err) })
			wr.mu.Lock() // the writer waits until both saves are queued
			for b.Loop() {
				for _, run := range []string{"", "run-1"} {
					s.set(run)
					if old {
						op, err := s.saveOp()
						p.queue = append(p.queue, progressItem{rec: encodedSaver{op, err}, save: true})
						continue
					}
					p.dropSavesLocked()
					p.queue = append(p.queue, progressItem{rec: s, save: true})
				}
				if old {
					p.queue = p.queue[1:] // the newer replaces it (pushSave)
				}
				p.scheduleLocked()
				wr.mu.Unlock()
				p.flush(context.Background())
				wr.mu.Lock()
			}
			wr.mu.Unlock()
			p.close()
		})
	}
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

// When a caller stops waiting for its writes (its context ended), doThen still learns how
// they ended: written after all, or dropped when the attempt closes its queue before the
// writer took them (no goroutine is left waiting).
func TestDoThenReportsLateWrites(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		defer goleak.VerifyNone(t, append(ignoreMiniredis, goleak.IgnoreCurrent())...)
		for _, closeFirst := range []bool{false, true} {
			gate := make(chan struct{})
			wr, r, _ := gatedWriter(b, gate)
			conv := Conversation{Integration: "test", ChatID: fmt.Sprint("late-", closeFirst)}
			p := wr.newProgress(conv, func(error) {})
			// The writer takes this event and blocks in its round trip: what follows waits.
			p.push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "a"})
			waitTaken(wr, p)
			final, err := r.prepareMany(conv, ReplyEvent{Type: EventAnswer, TaskID: "t", Text: "late"}, r.answeredKey("t"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			got := make(chan error, 1)
			err = p.doThen(ctx, func(err error) { got <- err }, []*preparedEvent{final})
			if !errors.Is(err, errNotWaited) {
				t.Fatalf("doThen with an ended context: %v, want errNotWaited", err)
			}
			if closeFirst {
				p.close() // the attempt ends before the writer took the final event
			}
			close(gate)
			select {
			case err := <-got:
				switch {
				case closeFirst && (!errors.Is(err, errWritesDropped) || final.written):
					t.Errorf("dropped: then(%v), written %v; want errWritesDropped, false", err, final.written)
				case !closeFirst && (err != nil || !final.written):
					t.Errorf("late: then(%v), written %v; want nil, true", err, final.written)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("then never ran (close first: %v)", closeFirst)
			}
			if !closeFirst {
				p.close()
				if ok, _ := r.Answered(context.Background(), "t"); !ok {
					t.Error("the late final event left no answered marker")
				}
			}
			p.flush(context.Background())
			b.rdb.Del(context.Background(), r.answeredKey("t"))
		}
	})
}
