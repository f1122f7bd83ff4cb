package outage

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

type capture struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (c *capture) Enabled(context.Context, slog.Level) bool { return true }
func (c *capture) Handle(_ context.Context, r slog.Record) error {
	c.mu.Lock()
	c.recs = append(c.recs, r.Clone())
	c.mu.Unlock()
	return nil
}
func (c *capture) WithAttrs([]slog.Attr) slog.Handler { return c }
func (c *capture) WithGroup(string) slog.Handler      { return c }

func (c *capture) count(level slog.Level) (n int, last string) {
	for _, r := range c.recs {
		if r.Level == level {
			n++
			last = r.Message
		}
	}
	return n, last
}

// Which of Asynq's lines are about an outage: its Redis lines whose error is a connection,
// a timeout or a full Redis; not its other lines, nor a Redis line whose error is Redis
// refusing a command for a reason of its own.
func TestIsAsynqLine(t *testing.T) {
	for msg, want := range map[string]bool{
		"Dequeue error: dial tcp 127.0.0.1:6379: connect: connection refused":                     true,
		"Failed to extend lease for tasks [a]: i/o timeout":                                       true,
		"Dequeue error: OOM command not allowed when used memory > 'maxmemory'.":                  true,
		"Failed to forward scheduled tasks: WRONGTYPE Operation against a key holding the wrong…": false,
		"recovering from panic: connection refused":                                               false,
	} {
		if got := IsAsynqLine(msg); got != want {
			t.Errorf("IsAsynqLine(%q) = %v, want %v", msg, got, want)
		}
	}
}

// One line every 100 ms for a minute: warnings at 0, 0.5, 1.5, 3.5, 7.5, 15.5, 31.5 s (one per
// backoff step), the error once past the lease, and a line after Gap starts a new outage.
func TestLogFoldsPerBackoffStep(t *testing.T) {
	c := &capture{}
	l := slog.New(c)
	var o Log
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	now := start
	msg := "Dequeue error: connection refused"
	for now.Sub(start) < time.Minute {
		o.Line(l, msg, now)
		now = now.Add(100 * time.Millisecond)
	}
	if n, _ := c.count(slog.LevelWarn); n != 7 {
		t.Errorf("%d warnings in a minute, want 7 (one per backoff step up to 31.5 s)", n)
	}
	if n, last := c.count(slog.LevelError); n != 1 || !strings.Contains(last, "lease") {
		t.Errorf("errors %d (%q), want one about the lease", n, last)
	}
	c.recs = nil
	o.Line(l, "Dequeue error: OOM command not allowed when used memory > 'maxmemory'.", now.Add(Gap+time.Second))
	if n, last := c.count(slog.LevelWarn); n != 1 || !strings.Contains(last, "full") {
		t.Errorf("a new outage on a full Redis: %d warnings (%q), want one saying it is full", n, last)
	}
}
