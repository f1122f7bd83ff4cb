// Package asynqlog is the worker's asynq.Logger: Asynq's lines in slog, with three of them
// told apart. A task revoked because its turn waits (parked) is routine; a task archived
// after a permanent error names the turn's ids and says it was not retried, where Asynq says
// its retries are used up; and the lines about a Redis outage tell the worker's health and
// fold into one warning per backoff step (queue/internal/health, queue/internal/outage).
package asynqlog

import (
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/lettaq/lettaq/queue/internal/health"
)

// Logger adapts slog to asynq.Logger. Asynq logs "Retry exhausted for task id=…" when
// it archives a task, also one whose handler returned a permanent error (SkipRetry) and was
// never retried; lettaq's line says which it was instead.
//
// Its lines about a Redis outage tell the worker's health (Worker.Ready), and
// fold into one "waiting for Redis" warning per backoff step
// (queue/internal/outage): a routine restart of Redis is a warning, not a page
// of errors; an outage longer than a task's lease is an error, once.
type Logger struct {
	l         *slog.Logger
	permanent *Permanent
	health    *health.Health
}

// New returns a Logger that writes to l; permanent (nil: none) names the tasks whose
// archiving is not a warning, h (nil: none) is told of Asynq's lines about a Redis outage.
func New(l *slog.Logger, permanent *Permanent, h *health.Health) Logger {
	return Logger{l: l, permanent: permanent, health: h}
}

// outage logs an Asynq line about a Redis outage (see Logger); false
// when msg is not one.
func (a Logger) outage(msg string) bool {
	return a.health != nil && a.health.AsynqLine(a.l, msg)
}

func (a Logger) Debug(args ...any) { a.l.Debug(fmt.Sprint(args...)) }
func (a Logger) Info(args ...any)  { a.l.Info(fmt.Sprint(args...)) }
func (a Logger) Warn(args ...any) {
	msg := fmt.Sprint(args...)
	if strings.HasPrefix(msg, "revoke task id=") {
		// A waiting turn parked (queue/internal/line): routine, not a warning.
		a.l.Debug("task revoked: the turn waits (parked)", "task_id", strings.TrimPrefix(msg, "revoke task id="))
		return
	}
	if id, ok := strings.CutPrefix(msg, "Retry exhausted for task id="); ok {
		if a.permanent != nil {
			if attrs, ok := a.permanent.take(id); ok {
				a.l.Info("task archived: its error is permanent, so it was not retried", attrs...)
				return
			}
		}
		a.l.Warn("task archived: its retries are used up", "task_id", id)
		return
	}
	if a.outage(msg) {
		return
	}
	a.l.Warn(msg)
}

func (a Logger) Error(args ...any) {
	msg := fmt.Sprint(args...)
	if a.outage(msg) {
		return
	}
	a.l.Error(msg)
}
func (a Logger) Fatal(args ...any) {
	a.l.Error(fmt.Sprint(args...), "fatal", true)
	os.Exit(1)
}

// Permanent holds the ids of tasks that failed permanently, with the ids of their turn
// (otid, run_id) when known, until Asynq logs their archiving (right after, on the same
// goroutine). It forgets everything past 10,000 tasks.
type Permanent struct {
	mu  sync.Mutex
	ids map[string][]any
}

// Add notes a task id; a turn's attrs given before or after are kept.
func (p *Permanent) Add(id string, attrs ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ids == nil || len(p.ids) >= 10000 {
		p.ids = map[string][]any{}
	}
	if len(attrs) > 0 || p.ids[id] == nil {
		p.ids[id] = append([]any{"task_id", id}, attrs...)
	}
}

// take returns the log attrs of id (task_id first) and forgets it.
func (p *Permanent) take(id string) ([]any, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	attrs, ok := p.ids[id]
	delete(p.ids, id)
	return attrs, ok
}
