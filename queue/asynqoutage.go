package queue

import (
	"log/slog"
	"strings"
	"time"
)

// Asynq's log lines about Redis trouble (asynq v0.26: processor,
// forwarder, heartbeater, janitor, recoverer).
var asynqRedisLines = []string{
	"Dequeue error",
	"Failed to forward scheduled tasks",
	"Failed to write server state data",
	"Failed to extend lease",
	"Failed to delete expired completed tasks",
	"recoverer: could not",
}

// asynqRedisLine reports whether msg is one of asynqRedisLines about an
// outage (its error is one of connection, timeout or a server not taking
// writes: see outageText).
func asynqRedisLine(msg string) bool {
	for _, p := range asynqRedisLines {
		if strings.HasPrefix(msg, p) {
			return outageText(msg)
		}
	}
	return false
}

// outageText reports whether an error's text (as Asynq prints it) says Redis
// cannot be reached or cannot take writes now (full: "OOM command not
// allowed when used memory > 'maxmemory'").
func outageText(s string) bool {
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

// asynqLease is Asynq's task lease (asynq v0.26, base.LeaseDuration): an
// outage longer than it lets Asynq's recoverer run the tasks in flight again.
const asynqLease = 30 * time.Second

// Backoff of the "waiting for Redis" warnings of an outage.
const (
	outageWarnFirst = 500 * time.Millisecond
	outageWarnMax   = 30 * time.Second
	// outageGap: a line this long after the last one starts a new outage.
	outageGap = 15 * time.Second
)

// outageLog folds Asynq's lines about a Redis outage into one "waiting for
// Redis" warning per backoff step (500 ms doubling to 30 s), and says once,
// as an error, when the outage outlasts a task's lease. Guarded by health.mu.
type outageLog struct {
	start, last, next time.Time
	step              time.Duration
	folded            int
	long              bool // the error is written
}

// line logs (or folds) Asynq's line msg about an outage, at now.
func (o *outageLog) line(l *slog.Logger, msg string, now time.Time) {
	if o.start.IsZero() || now.Sub(o.last) > outageGap {
		*o = outageLog{start: now, next: now, step: outageWarnFirst}
	}
	o.last = now
	down := now.Sub(o.start)
	if !o.long && down > asynqLease {
		o.long = true
		l.Error("Redis unreachable for longer than a task's lease: Asynq may run the turns that were in flight again",
			"down_for", down.Round(time.Millisecond).String(), "lease", asynqLease.String(), "asynq", msg)
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
	o.folded, o.next, o.step = 0, now.Add(o.step), min(2*o.step, outageWarnMax)
}
