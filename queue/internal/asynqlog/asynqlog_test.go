package asynqlog

import (
	"context"
	"log/slog"
	"sync"
	"testing"
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

// Asynq's archiving line: a task noted permanent is archived "not retried", at info, with
// its turn's ids, once; any other is a warning that its retries are used up. A revoke (a
// parked turn) is debug. Other lines pass as they are.
func TestArchivingAndRevokeLines(t *testing.T) {
	c := &capture{}
	var p Permanent
	p.Add("t1")
	p.Add("t1", "otid", "o-1")
	l := New(slog.New(c), &p, nil)
	l.Warn("Retry exhausted for task id=t1")
	l.Warn("Retry exhausted for task id=t1") // taken: now it is a plain one
	l.Warn("revoke task id=t2")
	l.Error("something else")
	want := []struct {
		level slog.Level
		msg   string
	}{
		{slog.LevelInfo, "task archived: its error is permanent, so it was not retried"},
		{slog.LevelWarn, "task archived: its retries are used up"},
		{slog.LevelDebug, "task revoked: the turn waits (parked)"},
		{slog.LevelError, "something else"},
	}
	if len(c.recs) != len(want) {
		t.Fatalf("%d lines, want %d", len(c.recs), len(want))
	}
	for i, w := range want {
		if c.recs[i].Level != w.level || c.recs[i].Message != w.msg {
			t.Errorf("line %d: %v %q, want %v %q", i, c.recs[i].Level, c.recs[i].Message, w.level, w.msg)
		}
	}
	otid := ""
	c.recs[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "otid" {
			otid = a.Value.String()
		}
		return true
	})
	if otid != "o-1" {
		t.Errorf("the permanent archiving line's otid %q, want o-1", otid)
	}
}
