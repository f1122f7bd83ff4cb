// Package claim takes over the turns of a worker that stopped beating: the watcher that
// claims the dead worker (atomically: one claimer; store.Takeover.Claim) enqueues one takeover
// task per turn the dead worker ran, which runs the turn under its own identity on a live
// worker, and marks the turn taken over, so that the original task, when Asynq recovers it
// later, ends without writing. The beats and the watch that find a dead worker, and the
// fencing of a running turn, are queue/internal/takeover's.
package claim

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/store"
)

const (
	// TombstoneTTL is how long a claimed worker's tombstone is kept (a worker paused longer
	// than that and then resumed is fenced by its lost ordering lease and the journal gate
	// only).
	TombstoneTTL = time.Hour
	// MarkerTTL is how long a turn's takeover marker is kept (longer than Asynq's recovery of
	// the original takes).
	MarkerTTL = 24 * time.Hour
	// Retention: a finished takeover task stays visible (its TaskInfo) this long.
	Retention = time.Hour
	// parallel bounds the turns of a dead worker taken over at once.
	parallel = 32
)

// Entry is what the registry keeps of a running turn (the value of its field in the
// worker's turns hash).
type Entry struct {
	Queue    string `json:"queue"`
	Runner   string `json:"runner"`
	Key      string `json:"key,omitempty"`
	Retried  int    `json:"retried"`
	MaxRetry int    `json:"max_retry"`
}

// Payload is a takeover task's payload: the turn to continue and its original payload.
type Payload struct {
	TaskID   string `json:"task_id"`
	Queue    string `json:"queue"`
	From     string `json:"from"`
	Retried  int    `json:"retried"`
	MaxRetry int    `json:"max_retry"`
	Payload  []byte `json:"payload"`
}

// DecodePayload reads a takeover task's payload.
func DecodePayload(b []byte) (Payload, error) {
	var p Payload
	if err := json.Unmarshal(b, &p); err != nil {
		return p, fmt.Errorf("queue: takeover payload: %w", err)
	}
	if p.TaskID == "" || len(p.Payload) == 0 {
		return p, errors.New("queue: takeover payload: no task id or payload")
	}
	return p, nil
}

// TaskID is the Asynq task id of the takeover of taskID from the dead worker instance dead.
func TaskID(dead, taskID string) string { return "takeover:" + dead + ":" + taskID }

// LiveHolder returns the runner that holds the turn now when its worker is alive (beats
// within after); a failed read counts as none.
func LiveHolder(ctx context.Context, st *store.Takeover, taskID string, after time.Duration, log *slog.Logger) (store.Holder, bool) {
	h, ok, err := st.LiveHolder(ctx, taskID, after)
	if err != nil {
		log.Debug("could not read the turn's holder", "task_id", taskID, "error", err.Error())
		return store.Holder{}, false
	}
	return h, ok
}

// Claimer claims dead workers and enqueues their turns' takeovers.
type Claimer struct {
	Store     *store.Takeover
	Client    *asynq.Client
	Inspector *asynq.Inspector
	Log       *slog.Logger
	// After is how long a worker's beats stop before it is taken for dead.
	After time.Duration
	// TaskType is the takeover tasks' Asynq type; Timeout their Asynq timeout (the turn's).
	TaskType string
	Timeout  time.Duration
	// TakenOver, when set, is told of each turn taken over (its queue).
	TakenOver func(queue string)
}

// Claim takes the turns of the dead worker instance dead over, when the watcher me is the
// one that claims it.
func (c *Claimer) Claim(ctx context.Context, me, dead string) {
	turns, ok, err := c.Store.Claim(ctx, dead, me, c.After, TombstoneTTL)
	if err != nil {
		c.Log.Warn("could not claim a dead worker", "dead", dead, "error", err.Error())
		return
	}
	if !ok {
		return
	}
	c.Log.Warn("a worker stopped beating: taking its turns over", "dead", dead, "turns", len(turns))
	// Each turn costs four round trips (its holder, its task's payload, the enqueue, the
	// marker): a dead worker with thousands of turns is taken over parallel at a time.
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for id, raw := range turns {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			c.takeOver(ctx, dead, id, raw)
		}()
	}
	wg.Wait()
}

// takeOver enqueues the takeover task of one turn of the dead worker.
func (c *Claimer) takeOver(ctx context.Context, dead, taskID, raw string) {
	log := c.Log.With(slog.String("task_id", taskID), slog.String("dead", dead))
	var e Entry
	if err := json.Unmarshal([]byte(raw), &e); err != nil || e.Queue == "" || e.Runner == "" {
		log.Warn("unreadable takeover entry: left to Asynq's recovery", "entry", raw)
		return
	}
	if h, live := LiveHolder(ctx, c.Store, taskID, c.After, c.Log); live && h.Instance != dead {
		log.Info("the dead worker's turn runs on a live worker: not taken over", "holder", h.Instance, "holder_runner", h.Runner)
		return
	}
	info, err := c.Inspector.GetTaskInfo(e.Queue, e.Runner)
	if err != nil || info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived {
		// Finished in the meantime (or deleted): nothing to continue.
		log.Info("the dead worker's turn is gone from its queue or ended: not taken over", "runner", e.Runner)
		return
	}
	payload := info.Payload
	if info.Type == c.TaskType {
		var p Payload
		if err := json.Unmarshal(info.Payload, &p); err != nil {
			log.Warn("unreadable takeover payload: left to Asynq's recovery", "runner", e.Runner, "error", err.Error())
			return
		}
		payload = p.Payload
	}
	b, err := json.Marshal(Payload{TaskID: taskID, Queue: e.Queue, From: dead, Retried: e.Retried,
		MaxRetry: e.MaxRetry, Payload: payload})
	if err != nil {
		log.Warn("could not encode the takeover", "error", err.Error())
		return
	}
	runner := TaskID(dead, taskID)
	_, err = c.Client.EnqueueContext(ctx, asynq.NewTask(c.TaskType, b), asynq.TaskID(runner), asynq.Queue(e.Queue),
		asynq.MaxRetry(max(e.MaxRetry-e.Retried, 0)), asynq.Timeout(c.Timeout),
		asynq.Retention(Retention))
	if err != nil && !errors.Is(err, asynq.ErrTaskIDConflict) {
		log.Warn("could not enqueue the takeover: left to Asynq's recovery", "error", err.Error())
		return
	}
	if err := c.Store.MarkTakenOver(ctx, taskID, runner, MarkerTTL); err != nil {
		log.Warn("could not mark the turn taken over", "error", err.Error())
	}
	if c.TakenOver != nil {
		c.TakenOver(e.Queue)
	}
	log.Info("turn taken over", "runner", runner, "was", e.Runner)
}
