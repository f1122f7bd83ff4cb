package queue

import (
	"context"
	"sync"
)

// progressMax bounds the progress events a turn keeps waiting for Redis.
const progressMax = 256

// progress writes a turn's progress events (phase, answer_delta, tool) in
// the order they were made, but off the goroutine that made them: the
// stream's reader never waits on Redis, so a slow or restarting Redis cannot
// starve the read and fire its stall clock. A goroutine runs only while
// events are waiting; a thinking turn holds none.
//
// When progressMax events are waiting (Redis is down), a new phase event is
// dropped (heartbeats repeat it); any other event drops the oldest waiting
// phase event, else the oldest event. The final event is not written here:
// the turn flushes progress first, then writes it itself, then closes
// progress, so nothing of the attempt follows its final event.
type progress struct {
	write func(ReplyEvent) // the synchronous write

	mu      sync.Mutex
	queue   []ReplyEvent
	running chan struct{} // closed when the running drain ends; nil when none runs
	closed  bool
	dropped int
}

func newProgress(write func(ReplyEvent)) *progress { return &progress{write: write} }

// push queues ev for writing.
func (p *progress) push(ev ReplyEvent) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		p.dropped++
		return
	}
	if len(p.queue) >= progressMax {
		p.dropped++
		if ev.Type == EventPhase {
			return
		}
		i := 0
		for j, q := range p.queue {
			if q.Type == EventPhase {
				i = j
				break
			}
		}
		p.queue = append(p.queue[:i], p.queue[i+1:]...)
	}
	p.queue = append(p.queue, ev)
	if p.running == nil {
		p.running = make(chan struct{})
		go p.drain(p.running)
	}
}

func (p *progress) drain(done chan struct{}) {
	defer close(done)
	for {
		p.mu.Lock()
		if len(p.queue) == 0 || p.closed {
			p.queue = nil
			p.running = nil
			p.mu.Unlock()
			return
		}
		ev := p.queue[0]
		p.queue = p.queue[1:]
		p.mu.Unlock()
		p.write(ev)
	}
}

// flush waits until every queued event is written, or ctx ends.
func (p *progress) flush(ctx context.Context) {
	p.mu.Lock()
	done := p.running
	p.mu.Unlock()
	if done == nil {
		return
	}
	select {
	case <-done:
	case <-ctx.Done():
	}
}

// close drops what is still waiting and refuses new events. It returns the
// number of events dropped over the progress's life.
func (p *progress) close() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	p.queue = nil
	return p.dropped
}
