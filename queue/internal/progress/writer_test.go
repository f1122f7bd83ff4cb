package progress

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// Stop writes the lazy events at once (it does not wait for their window) and returns once
// the round trip under way is done; a writer with nothing to write stops at once, and a
// write after Stop still goes.
func TestStopWritesWhatWaits(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		(&Writer{}).Stop() // nothing ever written: returns at once
		gate := make(chan struct{})
		wr, r, trips := gatedWriter(b, gate)
		wr.lazyWait = time.Hour // a window no test outlasts
		conv := Conversation{Integration: "test", ChatID: "stop"}
		p := wr.NewQueue(conv, func(err error) { t.Error(err) }, nil)
		defer p.Close()
		p.PushLazy(ReplyEvent{Type: EventPhase, TaskID: "t", Phase: PhaseThinking})
		stopped := make(chan struct{})
		go func() { wr.Stop(); close(stopped) }()
		waitTaken(wr, p) // Stop ran the writer for the lazy event: its round trip waits at the gate
		select {
		case <-stopped:
			t.Fatal("Stop returned while its round trip was under way")
		case <-time.After(50 * time.Millisecond):
		}
		close(gate)
		<-stopped
		if got := streamTexts(t, r, conv); len(got) != 1 || trips.Load() != 1 {
			t.Fatalf("after Stop: %d events in %d round trips, want 1 and 1", len(got), trips.Load())
		}
		wr.mu.Lock()
		running, timer := wr.running, wr.lazyTimer
		wr.mu.Unlock()
		if running || timer != nil {
			t.Fatalf("after Stop: loop running %v, lazy timer %v", running, timer != nil)
		}
		p.Push(ReplyEvent{Type: EventAnswerDelta, TaskID: "t", Text: "after"})
		p.Flush(context.Background())
		if got := streamTexts(t, r, conv); len(got) != 2 {
			t.Fatalf("a write after Stop: %d events, want 2", len(got))
		}
	})
}
