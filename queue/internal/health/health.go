// Package health is what a worker knows of its own ability to start and finish turns, for
// its readiness (queue's Worker.Ready): whether the writer's round trips (every turn's
// events, journal and release) go through, and whether Asynq meets Redis trouble of its own
// (its log lines), such as failing to take tasks off the queue or to extend their leases.
//
// While the worker is not ready, Ready starts a probe (at most one at a time, at most every
// ProbeEvery) so that the worker finds out by itself when Redis is back, even with no turn
// to write for; Wait waits for a probe under way, for the worker's stop.
package health

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/lettaq/lettaq/queue/internal/outage"
)

// TroubleFor is how long an Asynq line about Redis trouble keeps the worker not ready,
// unless a probe finds Redis answering Asynq before: a little more than the longest gap
// between two such lines while the trouble lasts (Asynq writes its server state every 5 s
// and logs a dequeue error at most every 3 s).
const TroubleFor = 7 * time.Second

// ProbeEvery bounds how often a worker that is not ready probes Redis.
const ProbeEvery = time.Second

// Health is a worker's readiness. Its zero value is ready to use (and ready).
type Health struct {
	// Now is the clock (nil: time.Now), for tests.
	Now func() time.Time

	probes sync.WaitGroup

	mu sync.Mutex
	// writerErr: the writer's last round trip failed as a whole, as when Redis cannot be
	// reached (nil: it went through).
	writerErr error
	probing   bool      // a probe is on its way
	probed    time.Time // when the last one started
	// asynqErr is Asynq's last line about Redis trouble, at asynqAt.
	asynqErr string
	asynqAt  time.Time
	outage   outage.Log
}

func (h *Health) clock() time.Time {
	if h.Now != nil {
		return h.Now()
	}
	return time.Now()
}

// Tripped records how the writer's round trip went: err is its outage, nil when it went
// through.
func (h *Health) Tripped(err error) {
	h.mu.Lock()
	h.writerErr = err
	h.mu.Unlock()
}

// AsynqLine takes one of Asynq's log lines: when it is about a Redis outage
// (outage.IsAsynqLine) it records the trouble, logs it folded to l and returns true; else it
// returns false and the caller logs the line.
func (h *Health) AsynqLine(l *slog.Logger, msg string) bool {
	if !outage.IsAsynqLine(msg) {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock()
	h.asynqErr, h.asynqAt = msg, now
	h.outage.Line(l, msg, now)
	return true
}

// AsynqBack records that Asynq's own connection answers again (a probe that started at
// since found it): its lines about the outage no longer keep the worker not ready.
func (h *Health) AsynqBack(since time.Time) {
	h.mu.Lock()
	if !h.asynqAt.After(since) {
		h.asynqErr = ""
	}
	h.mu.Unlock()
}

// Ready says why the worker cannot start or finish turns now (nil: it can). When it cannot,
// it has probe try Redis as the turns and Asynq reach it, on a goroutine of its own (at
// most every ProbeEvery, one at a time; probe gets when it started). probe may be nil.
func (h *Health) Ready(probe func(started time.Time)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock()
	var err error
	switch {
	case h.writerErr != nil:
		err = fmt.Errorf("the turns' writes to Redis fail: %w", h.writerErr)
	case h.asynqErr != "" && now.Sub(h.asynqAt) < TroubleFor:
		err = fmt.Errorf("asynq: %s", h.asynqErr)
	default:
		return nil
	}
	if !h.probing && now.Sub(h.probed) >= ProbeEvery && probe != nil {
		h.probing, h.probed = true, now
		h.probes.Add(1)
		go func() {
			defer h.probes.Done()
			probe(now)
			h.mu.Lock()
			h.probing = false
			h.mu.Unlock()
		}()
	}
	return err
}

// Wait returns once no probe is under way.
func (h *Health) Wait() { h.probes.Wait() }
