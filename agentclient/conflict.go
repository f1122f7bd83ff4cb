package agentclient

import (
	"errors"
	"net/http"
	"regexp"
	"strings"
)

// Conflict is what a 409 answer means. Letta answers 409 for several
// unrelated reasons; they are told apart by the text of the body, never by
// one exact string (the hosted service and the open-source server word
// them differently).
type Conflict int

const (
	// ConflictNone: not a 409.
	ConflictNone Conflict = iota
	// ConflictBusy: another run holds the conversation (Error.RunID names
	// it when the server said). Transient: the lock is released when that
	// run ends (at the latest after its 300 s TTL). Nothing was stored.
	ConflictBusy
	// ConflictPendingApproval: the agent waits for the answer to a tool
	// call's approval request; every new message is refused until it is
	// answered. Retrying cannot help.
	ConflictPendingApproval
	// ConflictOther: any other 409 (nothing to cancel, a database lock with
	// Retry-After).
	ConflictOther
)

func (c Conflict) String() string {
	switch c {
	case ConflictNone:
		return "none"
	case ConflictBusy:
		return "busy"
	case ConflictPendingApproval:
		return "pending_approval"
	}
	return "other"
}

// runIDInText finds a run id written into an error text ("run-<uuid>").
var runIDInText = regexp.MustCompile(`run-[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`)

// runIDAssigned finds "run_id=<id>" in an error text, the pattern Letta
// Code reads a busy answer's run with.
var runIDAssigned = regexp.MustCompile(`run_id=([A-Za-z0-9_-]+)`)

// conflictOf classifies a 409 by its text.
func conflictOf(status int, detail string) Conflict {
	if status != http.StatusConflict {
		return ConflictNone
	}
	d := strings.ToLower(detail)
	switch {
	case strings.Contains(d, "waiting for approval") || strings.Contains(d, "pending_approval") ||
		strings.Contains(d, "pending approval"):
		return ConflictPendingApproval
	case strings.Contains(d, "currently being processed") || strings.Contains(d, "is busy") ||
		strings.Contains(d, "conversation_busy") || strings.Contains(d, "conversation busy") ||
		strings.Contains(d, "another active run"):
		return ConflictBusy
	}
	return ConflictOther
}

// Conflict says what a 409 meant (ConflictNone for any other status).
func (e *Error) Conflict() Conflict { return conflictOf(e.StatusCode, e.Detail) }

// IsBusy reports a 409 "conversation busy": another run holds the
// conversation (or, on the default thread, the agent). Its run id, when the
// server named it, is BusyRunID(err). The request stored nothing; send again
// once that run has ended. Not to be confused with IsPendingApproval.
func IsBusy(err error) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Conflict() == ConflictBusy
}

// BusyRunID returns the run that holds the conversation, from a busy 409
// (its run_id field, else the run id written in its text), or "".
func BusyRunID(err error) string {
	var ae *Error
	if !errors.As(err, &ae) || ae.Conflict() != ConflictBusy {
		return ""
	}
	if ae.RunID != "" {
		return ae.RunID
	}
	if m := runIDAssigned.FindStringSubmatch(ae.Detail); m != nil {
		return m[1]
	}
	return runIDInText.FindString(ae.Detail)
}

// IsPendingApproval reports a 409 refusing a message because the agent is
// waiting for approval of a tool call: permanent until the approval request
// is answered.
func IsPendingApproval(err error) bool {
	var ae *Error
	return errors.As(err, &ae) && ae.Conflict() == ConflictPendingApproval
}

// IsGone reports a 410: the run was created too long ago (3 h) to resume
// its stream; poll its messages instead.
func IsGone(err error) bool { return StatusCode(err) == http.StatusGone }
