package relay_test

import (
	"testing"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// The start sweep marks the chats of integrations the relay has an adapter for, and leaves
// the others' (the web chat page's browsers read their streams themselves).
func TestSweepMarksOnlyChatsItRelays(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	e.emit(record.ReplyEvent{Type: record.EventAccepted, TaskID: "t1"})
	web := record.Conversation{Integration: "web", ChatID: "c1"}
	if _, err := e.replies.Emit(e.ctx, web, record.ReplyEvent{Type: record.EventAccepted, TaskID: "t2"}); err != nil {
		t.Fatal(err)
	}
	n, err := e.r.Sweep(e.ctx, 4)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 {
		t.Errorf("sweep marked %d chats, want 1 (the fake platform's, not the web chat's)", n)
	}
}
