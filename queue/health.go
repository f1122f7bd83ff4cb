package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
)

// health is what a worker knows of its own ability to start and finish
// turns, for its readiness (Worker.Ready): whether the writer's round trips
// (every turn's events, journal and release) go through, and whether Asynq
// meets Redis trouble of its own (its log lines: asynqLogger), such as
// failing to take tasks off the queue or to extend their leases.
type health struct {
	now func() time.Time

	mu sync.Mutex
	// writerErr: the writer's last round trip failed as a whole, as when
	// Redis cannot be reached (nil: it went through).
	writerErr error
	probing   bool      // a probe is on its way (Worker.probe)
	probed    time.Time // when the last one started
	// asynqErr is Asynq's last line about Redis trouble, at asynqAt.
	asynqErr string
	asynqAt  time.Time
	outage   outageLog
}

// asynqTroubleFor is how long an Asynq line about Redis trouble keeps the
// worker not ready, unless a probe finds Redis answering Asynq before: a
// little more than the longest gap between two such lines while the trouble
// lasts (Asynq writes its server state every 5 s and logs a dequeue error at
// most every 3 s).
const asynqTroubleFor = 7 * time.Second

// probeEvery bounds how often a worker that is not ready probes Redis
// (Worker.probe).
const probeEvery = time.Second

func (h *health) clock() time.Time {
	if h.now != nil {
		return h.now()
	}
	return time.Now()
}

// tripped records how the writer's round trip went: err is its outage (see
// batchOutage), nil when it went through.
func (h *health) tripped(err error) {
	h.mu.Lock()
	h.writerErr = err
	h.mu.Unlock()
}

// asynqTrouble records an Asynq line about Redis trouble.
func (h *health) asynqTrouble(msg string) {
	h.mu.Lock()
	h.asynqErr, h.asynqAt = msg, h.clock()
	h.mu.Unlock()
}

// asynqBack records that Asynq's own connection answers again (probe): its
// lines about the outage no longer keep the worker not ready.
func (h *health) asynqBack(since time.Time) {
	h.mu.Lock()
	if !h.asynqAt.After(since) {
		h.asynqErr = ""
	}
	h.mu.Unlock()
}

// ready says why the worker cannot start or finish turns now (nil: it can).
// When it cannot, it has probe try Redis as the turns and Asynq reach it (at
// most every probeEvery, one at a time; probe gets when it started), so that
// the worker finds out by itself when Redis is back even with no turn to
// write for, without waiting for Asynq's lines to stop (asynqTroubleFor).
func (h *health) ready(probe func(started time.Time)) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.clock()
	var err error
	switch {
	case h.writerErr != nil:
		err = fmt.Errorf("the turns' writes to Redis fail: %w", h.writerErr)
	case h.asynqErr != "" && now.Sub(h.asynqAt) < asynqTroubleFor:
		err = fmt.Errorf("asynq: %s", h.asynqErr)
	default:
		return nil
	}
	if !h.probing && now.Sub(h.probed) >= probeEvery && probe != nil {
		h.probing, h.probed = true, now
		go func() {
			probe(now)
			h.mu.Lock()
			h.probing = false
			h.mu.Unlock()
		}()
	}
	return err
}

// batchOutage is the outage the errors a round trip gives its items show:
// the first error when every item failed and it is not Redis refusing a
// command for a reason of its own (a wrong type, a script error: that
// item's trouble, not the writer's), else nil.
func batchOutage(batch []taken) error {
	var first error
	for _, tk := range batch {
		for _, err := range tk.errs {
			if err == nil {
				return nil
			}
			if first == nil {
				first = err
			}
		}
	}
	if !isOutage(first) {
		return nil
	}
	return first
}

// isOutage reports whether err says Redis cannot be reached or cannot take
// writes now (a connection error, a timeout, a server loading its data,
// that is a replica, or that is full: maxmemory reached under noeviction
// refuses every write with OOM while it still answers reads and PING),
// rather than refusing a command of ours.
func isOutage(err error) bool {
	if err == nil {
		return false
	}
	var re redis.Error
	if !errors.As(err, &re) {
		return true // not a reply: the connection, a timeout, a closed client
	}
	for _, p := range []string{"LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN", "TRYAGAIN", "BUSY", "OOM"} {
		if redis.HasErrorPrefix(re, p) {
			return true
		}
	}
	return false
}

// Ready reports whether the worker can start and finish turns: nil, or
// why not (its writes to Redis fail, or Asynq cannot take tasks off the
// queue, write its state or extend its tasks' leases). It never waits on
// Redis; once Redis is back it says so by itself: while it is not ready, a
// probe (at most once a second) sends a small write (ProbeWrite's) through
// the writer and a PING on Asynq's own connection. The worker's HTTP server
// answers /readyz with it.
func (w *Worker) Ready() error { return w.health.ready(w.probe) }

// ProbeWrite makes one small write to Redis, as a readiness probe does (a
// SET of a key of this worker's own, <prefix>ready:<worker id>, that
// expires by itself within seconds): nil when Redis takes writes. Unlike a
// PING it fails when Redis answers but refuses writes (full: OOM under
// noeviction; a replica: READONLY).
func (w *Worker) ProbeWrite(ctx context.Context) error {
	return store.QueueReadyProbe(ctx, w.replies.rdb, w.replies.keys(), w.cfg.WorkerID).Err()
}

// probe runs one round trip of the writer (ProbeWrite's write: its result
// is the writer's health), then, when it went through, PINGs Redis on
// Asynq's connection: an answer there ends the trouble Asynq's lines since
// started told of.
func (w *Worker) probe(started time.Time) {
	ctx, cancel := context.WithTimeout(context.Background(), writerTimeout)
	defer cancel()
	p := w.writer.newProgress(Conversation{}, func(error) {})
	defer p.close()
	err := p.do(ctx, nil, func(ctx context.Context, pl redis.Pipeliner, _ bool) func() error {
		return store.QueueReadyProbe(ctx, pl, w.replies.keys(), w.cfg.WorkerID).Err
	})
	if err != nil {
		return
	}
	if srv := w.srv.Load(); srv != nil && srv.Ping() == nil {
		w.health.asynqBack(started)
	}
}
