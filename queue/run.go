package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/queueweights"
	"github.com/lettaq/lettaq/queue/internal/service"
)

// The worker's run: Run checks the deployment's layout, starts the worker's parts in order and,
// once its context is done, stops them in the reverse order and closes what it made on Redis.

// Run works on the queues until ctx is done, then shuts down gracefully:
// it stops taking tasks, lets turns in flight finish for ShutdownTimeout,
// interrupts the rest a little before that (their state is journaled) and
// Asynq puts them back. Run may be called once.
func (w *Worker) Run(ctx context.Context) error {
	err := errors.New("queue: Worker.Run called twice")
	w.runOnce.Do(func() { err = w.run(ctx) })
	return err
}

func (w *Worker) run(ctx context.Context) error {
	defer w.closeRedis()
	if err := claimLayouts(ctx, w.replies.rdb, w.layouts, true, func(err error) {
		w.log.Warn("waiting for Redis to check the deployment's shard layout", "err", err)
	}); err != nil {
		if ctx.Err() != nil {
			return nil // stopped before it started
		}
		return err
	}
	srv := asynq.NewServer(w.conn, w.ServerConfig())
	w.srv.Store(srv)
	mux := asynq.NewServeMux()
	mux.Handle(TaskType, w.Handler())
	mux.Handle(TakeoverTaskType, w.Handler())
	parts := w.parts(&asynqServer{w: w, srv: srv, mux: mux})
	if err := parts.Start(context.Background()); err != nil {
		return fmt.Errorf("queue: start worker: %w", err)
	}
	w.log.Info("worker started", "worker", w.cfg.WorkerID, "queues", queueweights.String(w.cfg.Queues),
		"concurrency", w.cfg.Concurrency, "task_timeout", w.cfg.Budget.TaskTimeout().String())
	<-ctx.Done()
	w.log.Info("worker shutting down", "worker", w.cfg.WorkerID, "timeout", w.cfg.ShutdownTimeout.String())
	parts.Stop()
	w.closeIdle()
	return nil
}

// parts are what a running worker is made of, in the order they start;
// they stop in the reverse order:
//
//  0. the progress writer (queue/internal/progress): its loop runs only
//     while writes wait; it is last to stop, once every other part is
//     stopped, so that it writes what still waits before the worker
//     closes its Redis clients;
//  1. the takeover beats and watch (takeover.go), when on: first, so that
//     every turn registers from its first attempt; the last but the writer
//     to stop, so that a worker that stops is not taken for dead while its
//     turns are put back, and then it leaves the registry;
//  2. Asynq's server, which runs the turns (asynqServer);
//  3. the park sweeper (queue/internal/line): turns a dead worker left
//     parked in no Asynq queue are enqueued again;
//  4. the cancel subscriber (cancelwatch.go): cancels of the turns running
//     here, heard as they are published. It stops first: a worker that
//     shuts down hears no more cancels, and the attempt that continues an
//     interrupted turn elsewhere reads its cancel record at its start.
//
// The readiness probe is no loop: Ready starts one on demand, at most one
// at a time (queue/internal/health).
func (w *Worker) parts(server service.Service) *service.Group {
	var g service.Group
	g.Add(w.writer)
	if w.tk != nil {
		g.Add(w.tk)
	}
	g.Add(server, w.lines.Sweeper(), w.cancelSubscriber())
	return &g
}

// asynqServer is Asynq's server as one of the worker's parts.
type asynqServer struct {
	w   *Worker
	srv *asynq.Server
	mux *asynq.ServeMux
}

func (a *asynqServer) Start(context.Context) error { return a.srv.Start(a.mux) }

// Stop shuts the server down gracefully: it stops taking tasks, lets
// turns in flight finish for ShutdownTimeout, interrupts the rest a little
// before that (their state is journaled) so that Asynq puts them back, and
// waits for the handlers' bookkeeping and the parked turns' re-enqueues.
func (a *asynqServer) Stop() {
	w := a.w
	// Interrupt the turns still running shortly before Asynq gives up on
	// them, so that each journals its state and returns on its own.
	grace := min(2*time.Second, w.cfg.ShutdownTimeout/4)
	t := time.AfterFunc(w.cfg.ShutdownTimeout-grace, w.interruptTurns)
	a.srv.Shutdown()
	t.Stop()
	w.interruptTurns()
	// Asynq stops waiting for a handler once its context is done; wait for
	// the handlers to journal how they ended.
	if !w.awaitHandlers(grace + time.Second) {
		w.log.Warn("worker: turns still finishing after shutdown")
	}
	w.lines.Drain(2 * time.Second) // the parked turns' re-enqueues
}

// closeRedis closes what the worker's parts made on Redis (the Client that
// the approvals' answers go through, what the lines made, the sequencer's
// client), then the worker's own client.
func (w *Worker) closeRedis() {
	_ = w.approvals.Close()
	w.lines.Close() // (under ordering its re-enqueues use the orderer's Inspector)
	w.ord.close()
	w.closeRdb()
}
