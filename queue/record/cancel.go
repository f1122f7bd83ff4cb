package record

import "time"

// CancelRecord is what a cancel records: who asked, when, why, and, in the
// journal of the cancelled turn (TurnRecord.Cancel), the phase the turn was
// in when it stopped (CancelPhase…).
type CancelRecord struct {
	By     string    `json:"by"`
	At     time.Time `json:"at,omitzero"`
	Reason string    `json:"reason,omitempty"`
	Phase  string    `json:"phase,omitempty"`
}

// The phases a turn is cancelled in (CancelRecord.Phase).
const (
	// CancelPhaseWaiting: before it ran (waiting for its chat, scheduled,
	// or between attempts): never sent.
	CancelPhaseWaiting = "waiting"
	// CancelPhaseBeforeSend: the attempt was about to send: never sent.
	CancelPhaseBeforeSend = "before_send"
	// CancelPhaseStreaming: the run was streaming.
	CancelPhaseStreaming = "streaming"
	// CancelPhaseContinuation: the stream was lost and the attempt was
	// following the run (polls, resumes), or a recovering attempt found it.
	CancelPhaseContinuation = "continuation"
)

// StopReasonCancelled is the stop reason of a cancelled turn's final event
// and journal record (and of a run Letta cancelled).
const StopReasonCancelled = "cancelled"
