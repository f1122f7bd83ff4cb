package queue

import (
	"time"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/takeover"
)

// Fast takeover: a worker that dies mid-turn is found by the others' watch
// of its beats within Takeover.After, and its turns are continued elsewhere
// under their own identity. The registry, its beats and claims, and each
// attempt's registration and fencing are queue/internal/takeover's (its
// package doc tells how); here the worker makes its registry and each
// attempt its registration.

const (
	// defaultTakeoverBeat is WorkerConfig.Takeover.Beat's default.
	defaultTakeoverBeat = time.Second
)

// errTakenOver is the cause of a turn's context when its worker finds the
// turn was taken over by another worker (fencing).
var errTakenOver = takeover.ErrTakenOver

// TakeoverObserver, when the worker's Observer implements it, is told of
// each turn this worker took over from a dead one.
type TakeoverObserver interface {
	TurnTakenOver(queue string)
}

// newTakeover makes the worker's registry (not started: Worker.parts starts
// it first and stops it last).
func newTakeover(w *Worker) *takeover.Registry {
	cfg := takeover.Config{Store: store.NewTakeover(w.replies.rdb, store.Keys{Prefix: w.replies.opts.Prefix}),
		Conn: w.conn, WorkerID: w.cfg.WorkerID, After: w.cfg.Takeover.After, Beat: w.cfg.Takeover.Beat,
		TaskType: TakeoverTaskType, TaskTimeout: w.cfg.Budget.TaskTimeout(), Log: w.log}
	if o, ok := w.obs.(TakeoverObserver); ok {
		cfg.TakenOver = o.TurnTakenOver
	}
	return takeover.New(cfg)
}
