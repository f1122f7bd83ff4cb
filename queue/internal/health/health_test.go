package health

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// The writer's failed round trip makes the worker not ready, naming the error, until a
// round trip goes through; a probe starts at most once per ProbeEvery and never two at a
// time; Wait waits for the probe under way.
func TestReadyProbesWhileNotReady(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Health{Now: func() time.Time { return now }}
	if err := h.Ready(nil); err != nil {
		t.Fatalf("a new health: %v", err)
	}
	h.Tripped(errors.New("connection refused"))
	started := make(chan time.Time, 4)
	release := make(chan struct{})
	probe := func(at time.Time) { started <- at; <-release }
	if err := h.Ready(probe); err == nil || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("ready after a failed round trip: %v", err)
	}
	if at := <-started; !at.Equal(now) {
		t.Errorf("the probe started at %v, want %v", at, now)
	}
	now = now.Add(2 * ProbeEvery)
	_ = h.Ready(probe) // the first probe is still under way: no second one
	close(release)
	h.Wait()
	_ = h.Ready(probe) // within ProbeEvery of the first? No: 2 s later, so one more
	h.Wait()
	if n := len(started); n != 1 {
		t.Errorf("%d probes after the first, want 1", n)
	}
	_ = h.Ready(probe) // the same instant: none
	h.Wait()
	if n := len(started); n != 1 {
		t.Errorf("%d probes after the first, want still 1 (at most one per ProbeEvery)", n)
	}
	h.Tripped(nil)
	if err := h.Ready(probe); err != nil {
		t.Errorf("ready once a round trip went through: %v", err)
	}
}

// An Asynq line about an outage keeps the worker not ready for TroubleFor, or until a probe
// that started after it finds Asynq's connection answering; other lines are the caller's.
func TestAsynqTrouble(t *testing.T) {
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	h := &Health{Now: func() time.Time { return now }}
	l := slog.New(slog.NewTextHandler(io.Discard, nil))
	if h.AsynqLine(l, "recovering from panic") {
		t.Error("a line that is not about Redis taken as trouble")
	}
	if !h.AsynqLine(l, "Dequeue error: dial tcp: connect: connection refused") {
		t.Fatal("Asynq's dequeue error not taken as trouble")
	}
	if err := h.Ready(nil); err == nil || !strings.HasPrefix(err.Error(), "asynq: Dequeue error") {
		t.Fatalf("ready during Asynq's trouble: %v", err)
	}
	h.AsynqBack(now.Add(-time.Second)) // a probe that started before the line: it still counts
	if h.Ready(nil) == nil {
		t.Error("a probe older than the line ended the trouble")
	}
	h.AsynqBack(now)
	if err := h.Ready(nil); err != nil {
		t.Errorf("ready after Asynq answered again: %v", err)
	}
	h.AsynqLine(l, "Dequeue error: i/o timeout")
	now = now.Add(TroubleFor)
	if err := h.Ready(nil); err != nil {
		t.Errorf("ready %v after Asynq's last line: %v", TroubleFor, err)
	}
}
