package cancel

import (
	"context"
	"errors"
	"log/slog"
	"testing"

	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/record"
)

// fakeAttempt is an attempt whose cancel record is stored (nil: none), read by ReadCancel.
type fakeAttempt struct {
	fakeRun
	stored []byte
	reads  int
}

func (a *fakeAttempt) Log() *slog.Logger { return discard }

func (a *fakeAttempt) ReadCancel(context.Context) ([]byte, bool, error) {
	a.reads++
	return a.stored, a.stored != nil, nil
}

// A record that cannot be read is a cancel all the same (by "unknown"); a readable one is
// noted as it says.
func TestNoteJSON(t *testing.T) {
	var c Turn
	c.NoteJSON([]byte(`{"by":"ops","reason":"wrong chat"}`), &fakeAttempt{})
	if got := c.Asked(); got == nil || got.By != "ops" || got.Reason != "wrong chat" {
		t.Errorf("noted %+v, want the record's", got)
	}
	var bad Turn
	bad.NoteJSON([]byte(`{not json`), &fakeAttempt{})
	if got := bad.Asked(); got == nil || got.By != "unknown" {
		t.Errorf("noted %+v for an unreadable record, want a cancel by unknown", got)
	}
}

// BeforeSend lets an uncancelled turn send; the round trip's word that a record exists
// reads it (an empty cancel when the read finds none after all), and a cancelled turn's
// send is refused, which End reports.
func TestBeforeSend(t *testing.T) {
	ctx := context.Background()
	var c Turn
	a := &fakeAttempt{}
	if err := c.BeforeSend(ctx, false, a); err != nil || a.reads != 0 {
		t.Fatalf("BeforeSend of an uncancelled turn: %v, %d reads; want nil, none", err, a.reads)
	}
	a.stored = []byte(`{"by":"ops"}`)
	if err := c.BeforeSend(ctx, true, a); !errors.Is(err, ErrBeforeSend) || a.reads != 1 || c.Asked().By != "ops" {
		t.Fatalf("BeforeSend with a record: %v, %d reads, %+v; want refused after one read of ops's record", err, a.reads, c.Asked())
	}
	if refused, _ := c.End(); !refused {
		t.Error("End does not report the refused send")
	}
	var gone Turn
	if err := gone.BeforeSend(ctx, true, &fakeAttempt{}); !errors.Is(err, ErrBeforeSend) || gone.Asked() == nil {
		t.Errorf("BeforeSend whose read found no record: %v, %+v; want refused, cancelled", err, gone.Asked())
	}
}

// At the start a cancelled turn never sent ends; one that may have reached Letta goes on,
// recovering when its run is known.
func TestAtStart(t *testing.T) {
	var none Turn
	if cr, end := none.AtStart(false, false, discard); cr != nil || end {
		t.Errorf("AtStart without a cancel: %+v, %v", cr, end)
	}
	var waiting Turn
	waiting.Note(rec{By: "a"}, &fakeRun{}, discard)
	if cr, end := waiting.AtStart(false, false, discard); cr == nil || cr.By != "a" || !end {
		t.Errorf("AtStart of a turn never sent: %+v, %v; want its cancel, end", cr, end)
	}
	var sent Turn
	sent.Note(rec{By: "a"}, &fakeRun{}, discard)
	if cr, end := sent.AtStart(true, true, discard); cr != nil || end {
		t.Errorf("AtStart of a turn that may have reached Letta: %+v, %v; want it to go on", cr, end)
	}
	if _, recovered := sent.End(); !recovered {
		t.Error("a turn that started with its run known is not recovering")
	}
}

// Decided names the phase the turn was cancelled in.
func TestDecidedPhase(t *testing.T) {
	cases := []struct {
		name     string
		refuse   bool
		d        continuation.Result
		activity continuation.Activity
		want     string
	}{
		{"streaming", false, continuation.Result{}, "", record.CancelPhaseStreaming},
		{"refused send", true, continuation.Result{}, "", record.CancelPhaseBeforeSend},
		{"polled", false, continuation.Result{Polls: 1}, "", record.CancelPhaseContinuation},
		{"resumed", false, continuation.Result{Resumes: 1}, "", record.CancelPhaseContinuation},
		{"recovering", false, continuation.Result{}, continuation.ActivityRecovering, record.CancelPhaseContinuation},
	}
	for _, tc := range cases {
		var c Turn
		c.Note(rec{By: "a"}, &fakeRun{}, discard)
		if tc.refuse {
			c.RefusedSend()
		}
		if cr, phase := c.Decided(tc.d, tc.activity); cr == nil || phase != tc.want {
			t.Errorf("%s: %+v, phase %q; want %q", tc.name, cr, phase, tc.want)
		}
	}
	var none Turn
	if cr, phase := none.Decided(continuation.Result{}, ""); cr != nil || phase != "" {
		t.Errorf("Decided without a cancel: %+v, %q", cr, phase)
	}
}
