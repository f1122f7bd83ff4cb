package journal

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// The names the tests use, as package queue names them.
type (
	TurnRecord     = record.TurnRecord
	Intent         = record.Intent
	Wait           = record.Wait
	PhaseMark      = record.PhaseMark
	Usage          = record.Usage
	ToolSummary    = record.ToolSummary
	ApprovalRecord = record.ApprovalRecord
	CancelRecord   = record.CancelRecord
	Conversation   = record.Conversation
)

const (
	OutcomeAnswered      = "answered"
	OutcomeFailed        = record.OutcomeFailed
	OutcomeRetrying      = "retrying"
	TimeoutClockStall    = "stall"
	ResendSent           = "resent"
	ResendNotNeeded      = "not_needed"
	CancelPhaseStreaming = "streaming"
)

// testJournal is a journal's store and saver under prefix, with the
// options package queue's Journal defaults to but for those given.
func testJournal(rdb redis.UniversalClient, prefix string, retention time.Duration, maxIndex int64, now func() time.Time) (*store.Journal, *Saver) {
	if retention == 0 {
		retention = 7 * 24 * time.Hour
	}
	if maxIndex == 0 {
		maxIndex = 100000
	}
	if now == nil {
		now = time.Now
	}
	st := store.NewJournal(rdb, store.Keys{Prefix: prefix}, retention, maxIndex, IndexNames())
	return st, NewSaver(st, now)
}

// indexKey is the key of index i.
func indexKey(st *store.Journal, i Index) string { return st.Keys.Journal().Index(i.Name()) }

// rjRecord is a turn's record as a client's enqueue leaves it.
func rjRecord(taskID string, enqueued time.Time) *TurnRecord {
	return &TurnRecord{TaskID: taskID, Otid: "otid-" + taskID, AgentID: "agent-1",
		Conversation: Conversation{Integration: "telegram", ChatID: "-100123:45"}, MessageID: "msg-" + taskID,
		Queue: "default", EnqueuedAt: enqueued}
}

// storedRecord reads taskID's record.
func storedRecord(t *testing.T, st *store.Journal, taskID string) *TurnRecord {
	t.Helper()
	b, err := st.Record(context.Background(), taskID)
	if err != nil {
		t.Fatalf("record %s: %v", taskID, err)
	}
	rec, err := DecodeRecord(taskID, b)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}
