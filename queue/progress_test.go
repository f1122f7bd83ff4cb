package queue

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// A write that blocks (Redis slow or down) never blocks the producer; events are written in
// order; flush waits for them; close drops the rest and leaves no goroutine behind.
func TestProgressWritesInOrderOffTheProducer(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gate := make(chan struct{})
	var mu sync.Mutex
	var got []string
	p := newProgress(func(ev ReplyEvent) {
		<-gate
		mu.Lock()
		got = append(got, ev.Text)
		mu.Unlock()
	})
	pushed := make(chan struct{})
	go func() {
		for i := range 10 {
			p.push(ReplyEvent{Type: EventAnswerDelta, Text: fmt.Sprint(i)})
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
	mu.Lock()
	if fmt.Sprint(got) != "[0 1 2 3 4 5 6 7 8 9]" {
		t.Fatalf("written %v", got)
	}
	mu.Unlock()
	p.push(ReplyEvent{Type: EventAnswerDelta, Text: "10"})
	p.flush(context.Background())
	if n := p.close(); n != 0 {
		t.Fatalf("dropped %d", n)
	}
	p.push(ReplyEvent{Type: EventAnswerDelta, Text: "after close"})
	p.flush(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 11 {
		t.Fatalf("written after close: %v", got)
	}
}

// While Redis is down the waiting events are bounded: phase events go first, the rest keep
// their order.
func TestProgressBoundDropsPhasesFirst(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	gate := make(chan struct{})
	var got []ReplyEvent
	var mu sync.Mutex
	p := newProgress(func(ev ReplyEvent) {
		<-gate
		mu.Lock()
		got = append(got, ev)
		mu.Unlock()
	})
	// The first event is taken by the drain and blocks in write; the rest wait.
	p.push(ReplyEvent{Type: EventPhase, Phase: PhaseThinking})
	for i := range progressMax + 50 {
		if i%2 == 0 {
			p.push(ReplyEvent{Type: EventPhase, Phase: PhaseThinking})
		} else {
			p.push(ReplyEvent{Type: EventAnswerDelta, Text: fmt.Sprint(i)})
		}
	}
	p.mu.Lock()
	waiting := len(p.queue)
	p.mu.Unlock()
	if waiting > progressMax {
		t.Fatalf("%d events waiting, bound %d", waiting, progressMax)
	}
	close(gate)
	p.flush(context.Background())
	dropped := p.close()
	mu.Lock()
	defer mu.Unlock()
	deltas, last := 0, -1
	for _, ev := range got {
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
	if dropped == 0 || len(got)+dropped != progressMax+51 {
		t.Errorf("written %d + dropped %d != pushed %d", len(got), dropped, progressMax+51)
	}
}
