// Package outage tells Asynq's log lines about a Redis outage from its other lines, and
// folds them: a routine restart of Redis is one "waiting for Redis" warning per backoff
// step, not a page of errors; an outage longer than a task's lease is an error, once.
package outage

import (
	"log/slog"
	"strings"
	"time"
)

// asynqRedisLines are the beginnings of Asynq's log lines about Redis trouble (asynq
// v0.26: processor, forwarder, heartbeater, janitor, recoverer).
var asynqRedisLines = []string{
	"Dequeue error",
	"Failed to forward scheduled tasks",
	"Failed to write server state data",
	"Failed to extend lease",
	"Failed to delete expired completed tasks",
	"recoverer: could not",
}

// IsAsynqLine reports whether msg is one of Asynq's lines about Redis trouble whose error
// is an outage (connection, timeout, or a server not taking writes: see Text).
func IsAsynqLine(msg string) bool {
	for _, p := range asynqRedisLines {
		if strings.HasPrefix(msg, p) {
			return Text(msg)
		}
	}
	return false
}

// Text reports whether an error's text (as Asynq prints it) says Redis cannot be reached
// or cannot take writes now (full: "OOM command not allowed when used memory >
// 'maxmemory'").
func Text(s string) bool {
	for _, p := range []string{"connection refused", "i/o timeout", "EOF", "connection reset", "broken pipe",
		"no route to host", "network is unreachable", "no such host", "deadline exceeded",
		"use of closed network connection", "client is closed", "pool timeout", "LOADING", "READONLY", "MASTERDOWN", "CLUSTERDOWN",
		"OOM command not allowed"} {
		if strings.Contains(s, p) {
			return true
		}
	}
	return false
}

// AsynqLease is Asynq's task lease (asynq v0.26, base.LeaseDuration): an outage longer
// than it lets Asynq's recoverer run the tasks in flight again.
const AsynqLease = 30 * time.Second

// Backoff of the "waiting for Redis" warnings of an outage.
const (
	WarnFirst = 500 * time.Millisecond
	WarnMax   = 30 * time.Second
	// Gap: a line this long after the last one starts a new outage.
	Gap = 15 * time.Second
)

// Log folds the lines of an outage into one "waiting for Redis" warning per backoff step
// (WarnFirst doubling to WarnMax), and says once, as an error, when the outage outlasts a
// task's lease. Its zero value is ready; it is not safe for concurrent use (the worker's
// health guards it).
type Log struct {
	start, last, next time.Time
	step              time.Duration
	folded            int
	long              bool // the error is written
}

// Line logs (or folds) Asynq's line msg about an outage, seen at now, to l.
func (o *Log) Line(l *slog.Logger, msg string, now time.Time) {
	if o.start.IsZero() || now.Sub(o.last) > Gap {
		*o = Log{start: now, next: now, step: WarnFirst}
	}
	o.last = now
	down := now.Sub(o.start)
	if !o.long && down > AsynqLease {
		o.long = true
		l.Error("Redis unreachable for longer than a task's lease: Asynq may run the turns that were in flight again",
			"down_for", down.Round(time.Millisecond).String(), "lease", AsynqLease.String(), "asynq", msg)
		return
	}
	if now.Before(o.next) {
		o.folded++
		return
	}
	attrs := []any{"down_for", down.Round(time.Millisecond).String(), "next_warning_in", o.step.String(), "asynq", msg}
	if o.folded > 0 {
		attrs = append(attrs, "folded", o.folded)
	}
	what := "waiting for Redis: Asynq cannot reach it"
	if strings.Contains(msg, "OOM command not allowed") {
		what = "waiting for Redis: it is full (maxmemory, noeviction) and refuses Asynq's writes"
	}
	l.Warn(what, attrs...)
	o.folded, o.next, o.step = 0, now.Add(o.step), min(2*o.step, WarnMax)
}
