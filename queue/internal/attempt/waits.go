package attempt

import (
	"strings"
	"time"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/record"
)

// addWait adds a wait behind behind to rec, closing the open one if it is
// behind something else; false when the open wait is already this one (the
// answer turn of an approval request the turn waits behind is part of that
// wait).
func addWait(rec *record.TurnRecord, behind, reason string, now time.Time) bool {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		open := rec.Waits[n-1].Behind
		if open == behind {
			return false
		}
		if req, ok := strings.CutPrefix(open, "approval request "); ok && isAnswerOf(behind, req) {
			return false
		}
		rec.Waits[n-1].Until = now
	}
	rec.Waits = append(rec.Waits, record.Wait{From: now, Behind: behind, Reason: reason})
	return true
}

// endWaits closes rec's open wait: the turn starts at now.
func endWaits(rec *record.TurnRecord, now time.Time) {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		rec.Waits[n-1].Until = now.UTC()
	}
}

// openWait is rec's open wait, nil when none.
func openWait(rec *record.TurnRecord) *record.Wait {
	if n := len(rec.Waits); n > 0 && rec.Waits[n-1].Until.IsZero() {
		return &rec.Waits[n-1]
	}
	return nil
}

// isAnswerOf reports whether taskID is an answer turn of the approval
// request requestTaskID (approval.AnswerTaskIDAfter: its first answer, or one after
// failed ones).
func isAnswerOf(taskID, requestTaskID string) bool {
	if taskID == approval.AnswerTaskID(requestTaskID) {
		return true
	}
	rest, ok := strings.CutPrefix(taskID, "answer#")
	if !ok {
		return false
	}
	_, rest, ok = strings.Cut(rest, ":")
	return ok && rest == strings.TrimPrefix(approval.AnswerTaskID(requestTaskID), "answer:")
}
