package record

// Turn outcomes (TurnRecord.Outcome and Attempt.Outcome): values stored in
// Redis, never renamed.
const (
	OutcomeAnswered         = "answered"
	OutcomeFailed           = "failed"
	OutcomeApprovalRequired = "approval_required"
	OutcomeStillRunning     = "still_running"
	OutcomeNotAdmitted      = "not_admitted"
	// OutcomeCancelled: the turn was stopped (a cancel); TurnRecord.Cancel
	// says by whom, when and in which phase.
	OutcomeCancelled = "cancelled"
	// OutcomeRetrying ends an attempt that left the turn to a later attempt.
	OutcomeRetrying = "retrying"
	// OutcomeCoalesced: the message was answered by another turn (AnsweredBy).
	OutcomeCoalesced = "coalesced"
	// OutcomeBusy ends an attempt refused because the agent's thread was
	// busy with another run (Attempt.Outcome).
	OutcomeBusy = "busy"
	// OutcomeAwaitingApproval ends an attempt of a message that waits for its
	// chat's approval request to be answered (policy wait or deny) and could
	// not park (queue/internal/line: its task could not be read, or a takeover runs
	// it): it is put back like a busy turn, without a retry used.
	OutcomeAwaitingApproval = "awaiting_approval"
)
