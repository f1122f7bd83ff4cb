package queue

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/service"
)

// lifecycle is the worker's one run: Run's once, the Asynq server it runs
// (its Ping uses Asynq's own connection), the handlers in flight, so that a
// shutdown waits for their bookkeeping, and what a shutdown cancels: the
// handlers' contexts, with attempt.ErrShutdown.
type lifecycle struct {
	runOnce  sync.Once
	srv      atomic.Pointer[asynq.Server] // set by Run
	inflight sync.WaitGroup
	stops    service.Stops
}

// interruptTurns ends the contexts of the handlers in flight (their cause:
// attempt.ErrShutdown), so that each journals its state and returns.
func (l *lifecycle) interruptTurns() { l.stops.Stop(attempt.ErrShutdown) }

// awaitHandlers waits up to d for the handlers in flight to return, and
// reports whether they did.
func (l *lifecycle) awaitHandlers(d time.Duration) bool {
	done := make(chan struct{})
	go func() { l.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return true
	case <-time.After(d):
		return false
	}
}
