// Package service gives the worker's background loops one shape, as Asynq's heartbeater,
// recoverer and subscriber, and River's maintenance services, have theirs: Start returns at
// once with the loop running in the background, Stop ends it and returns once it has ended.
// The worker starts its loops in one place, in order, and stops them in the reverse order
// (queue/worker.go, Worker.run; docs/architecture.md says why that order).
package service

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// Service is a background loop of the worker's.
type Service interface {
	// Start starts the loop and returns at once. ctx bounds the loop's whole life (Stop
	// ends it sooner); a Service started twice runs once.
	Start(ctx context.Context) error
	// Stop ends the loop and returns once it has ended. A Service never started, or
	// already stopped, returns at once.
	Stop()
}

// Loop runs one function in the background between Start and Stop: the common part of
// every Service here.
type Loop struct {
	mu      sync.Mutex
	cancel  context.CancelFunc
	stopped chan struct{}
}

// Go runs run(ctx) on a goroutine of its own unless the loop already runs; ctx ends at
// Stop.
func (l *Loop) Go(ctx context.Context, run func(ctx context.Context)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped != nil {
		return
	}
	ctx, l.cancel = context.WithCancel(ctx)
	l.stopped = make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		run(ctx)
	}(l.stopped)
}

// Stop cancels the running function's context and waits for it to return.
func (l *Loop) Stop() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.stopped == nil {
		return
	}
	l.cancel()
	<-l.stopped
	l.cancel, l.stopped = nil, nil
}

// Ticker is a Service that calls Tick every Every until it is stopped: the park sweeper and
// the takeover beats are Tickers.
type Ticker struct {
	// Every is the time between two ticks (from one tick's end to the next one's start).
	Every time.Duration
	// Jitter spreads the ticks of many workers: each wait is Every × (1 ± Jitter), Jitter
	// in [0, 1).
	Jitter float64
	// Immediate ticks once at Start, before the first wait.
	Immediate bool
	// Tick is the loop's work; its ctx ends at Stop.
	Tick func(ctx context.Context)

	loop Loop
}

// Start starts the ticks.
func (t *Ticker) Start(ctx context.Context) error {
	t.loop.Go(ctx, t.run)
	return nil
}

// Stop ends the ticks, waiting for a tick under way.
func (t *Ticker) Stop() { t.loop.Stop() }

func (t *Ticker) run(ctx context.Context) {
	if t.Immediate {
		t.Tick(ctx)
	}
	for {
		d := t.Every
		if t.Jitter > 0 {
			d = time.Duration(float64(d) * (1 - t.Jitter + 2*t.Jitter*rand.Float64()))
		}
		timer := time.NewTimer(d)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		t.Tick(ctx)
	}
}

// Group starts Services in the order they were added and stops them in the reverse order.
type Group struct {
	services []Service
	started  int
}

// Add appends s to the group's order.
func (g *Group) Add(s ...Service) { g.services = append(g.services, s...) }

// Start starts the services in order; when one fails, the ones started are stopped again
// and its error returned.
func (g *Group) Start(ctx context.Context) error {
	for _, s := range g.services[g.started:] {
		if err := s.Start(ctx); err != nil {
			g.Stop()
			return err
		}
		g.started++
	}
	return nil
}

// Stop stops the started services, the last started first.
func (g *Group) Stop() {
	for ; g.started > 0; g.started-- {
		g.services[g.started-1].Stop()
	}
}
