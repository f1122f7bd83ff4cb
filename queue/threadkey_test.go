package queue

import (
	"testing"

	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// TestThreadKeyIsTheStores: the key the end-to-end tests read a chat's
// thread from (thread.Key) is the one the worker writes (store.Keys.Thread
// of the thread's hash), under a prefix and under the default one.
func TestThreadKeyIsTheStores(t *testing.T) {
	c := record.Conversation{Integration: "web", ChatID: "c:1"}
	for _, prefix := range []string{"lettaq-unit:{x}:", ""} {
		want := store.Keys{Prefix: prefix}.Thread(store.ThreadOf{Integration: c.Integration, ChatID: c.ChatID, Hash: threadHash("agent-1", c)})
		if got := thread.Key(prefix, "agent-1", c.Integration, c.ChatID); got != want {
			t.Errorf("thread.Key(%q) = %q, the store writes %q", prefix, got, want)
		}
	}
}
