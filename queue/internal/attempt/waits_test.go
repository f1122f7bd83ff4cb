package attempt

import (
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/record"
)

// One wait per thing waited behind: looking again behind the same adds
// nothing; the answer turn of the approval request waited for is the same
// wait; something else closes the wait and opens another; endWaits closes
// the last.
func TestAddWaitMergesLooks(t *testing.T) {
	rec := &record.TurnRecord{}
	t0 := time.Now()
	if !addWait(rec, "approval request turn:a", "r", t0) || addWait(rec, "approval request turn:a", "r", t0.Add(time.Minute)) ||
		addWait(rec, approval.AnswerTaskID("turn:a"), "r", t0.Add(2*time.Minute)) || addWait(rec, approval.AnswerTaskIDAfter("turn:a", 1), "r", t0.Add(3*time.Minute)) {
		t.Fatalf("looks again added waits: %+v", rec.Waits)
	}
	if !addWait(rec, "turn:b", "r", t0.Add(4*time.Minute)) || len(rec.Waits) != 2 || !rec.Waits[0].Until.Equal(t0.Add(4*time.Minute)) {
		t.Fatalf("a new wait: %+v", rec.Waits)
	}
	endWaits(rec, t0.Add(5*time.Minute))
	if openWait(rec) != nil || !rec.Waits[1].Until.Equal(t0.Add(5*time.Minute).UTC()) {
		t.Fatalf("ended: %+v", rec.Waits)
	}
}
