package cancel

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"

	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/record"
)

// ErrBeforeSend is BeforeSend's refusal of a cancelled turn.
var ErrBeforeSend = errors.New("lettaq: the turn was cancelled before it was sent")

// Attempt is what a Turn's checks need of the attempt: its run at Letta, its log, and a
// read of its cancel record on its own.
type Attempt interface {
	Run
	Log() *slog.Logger
	// ReadCancel reads the turn's cancel record (b: its JSON; found: there is one).
	ReadCancel(ctx context.Context) (b []byte, found bool, err error)
}

// NoteJSON notes the turn's cancel (b: its record's JSON; nil: a cancel whose record was not
// read, noted as an empty one; unreadable: a cancel by "unknown"), and asks Letta to cancel
// the run when the turn has one under way.
func (c *Turn) NoteJSON(b []byte, a Attempt) {
	var cr record.CancelRecord
	if len(b) > 0 && json.Unmarshal(b, &cr) != nil {
		cr = record.CancelRecord{By: "unknown"}
	}
	if c.Note(cr, a, a.Log()) {
		a.Log().Info("the turn is cancelled", "by", cr.By)
	}
}

// Read reads the turn's cancel record on its own (when the start's reads come after the
// ordering acquire) and notes it: a failed read is left to the start's reads.
func (c *Turn) Read(ctx context.Context, a Attempt) {
	b, found, err := a.ReadCancel(ctx)
	if err == nil && found {
		c.NoteJSON(b, a)
	}
}

// BeforeSend is the check before the attempt sends: ErrBeforeSend when the turn was
// cancelled. found says the round trip of the intent read a record (read again on its own
// under ctx, when none was noted yet).
func (c *Turn) BeforeSend(ctx context.Context, found bool, a Attempt) error {
	if found && c.Asked() == nil {
		c.Read(ctx, a)
		if c.Asked() == nil {
			c.NoteJSON(nil, a)
		}
	}
	if c.Asked() == nil {
		return nil
	}
	c.RefusedSend()
	return ErrBeforeSend
}

// AtStart decides, at the start of an attempt whose record is built, what a cancel does: a
// turn never sent (sent: a live intent; runKnown: its record names a run) ends here, and
// AtStart returns its cancel and end; one that may have reached Letta goes on, and its run
// is cancelled once its thread is known.
func (c *Turn) AtStart(sent, runKnown bool, log *slog.Logger) (cr *record.CancelRecord, end bool) {
	if cr = c.Asked(); cr == nil {
		return nil, false
	}
	if !sent && !runKnown {
		return cr, true
	}
	c.Recovered(runKnown)
	log.Info("the turn was cancelled while it may have reached Letta: its run is cancelled, never sent again")
	return nil, false
}

// Decided is told that the run's decision d is made (activity: the stream's last): from
// here on Letta is not asked to cancel any more. It returns the turn's cancel (nil: none)
// and the phase the turn is in (record.CancelPhase…, for the cancelled ending).
func (c *Turn) Decided(d continuation.Result, activity continuation.Activity) (cr *record.CancelRecord, phase string) {
	beforeSend, recovered := c.End()
	if cr = c.Asked(); cr == nil {
		return nil, ""
	}
	switch {
	case beforeSend:
		phase = record.CancelPhaseBeforeSend
	case recovered || d.Polls > 0 || d.Resumes > 0 ||
		activity == continuation.ActivityRecovering || activity == continuation.ActivityContinuing:
		phase = record.CancelPhaseContinuation
	default:
		phase = record.CancelPhaseStreaming
	}
	return cr, phase
}
