package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// TestStartReads: the start's reads find what each store wrote under its
// own keys, and report an empty Redis as nothing read (not as errors).
func TestStartReads(t *testing.T) {
	rdb := testredis.New(t).Client(t)
	ctx := context.Background()
	keys := Keys{Prefix: testkit.Prefix(t, rdb)}
	s := StartStores{
		Journal:   NewJournal(rdb, keys, time.Minute, 10, nil),
		Replies:   NewReplies(rdb, keys, 10, time.Minute, 0),
		Approvals: Approvals{RDB: rdb, Keys: keys},
		Threads:   Threads{RDB: rdb, Keys: keys},
	}
	r := StartRead{TaskID: "t1", Pending: true, AgentID: "agent-1", Scope: "chat", Thread: ThreadOf{Hash: "h1"}}

	sr := s.ReadStart(ctx, r)
	if b, found, err := sr.Record(); found || b != nil || err != nil {
		t.Fatalf("empty: Record() = %q, %v, %v; want none", b, found, err)
	}
	if ans, err := sr.Answered(); ans || err != nil {
		t.Fatalf("empty: Answered() = %v, %v", ans, err)
	}
	if in, err := sr.Intents(); len(in) != 0 || err != nil {
		t.Fatalf("empty: Intents() = %q, %v", in, err)
	}
	if p, err := sr.Pending(); p != "" || err != nil {
		t.Fatalf("empty: Pending() = %q, %v", p, err)
	}
	if th, read := sr.ThreadRead(); th != "" || !read {
		t.Fatalf("empty: ThreadRead() = %q, %v; want read, none", th, read)
	}

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(rdb.Set(ctx, keys.Journal().Turn("t1"), `{"task_id":"t1"}`, time.Minute).Err())
	must(rdb.RPush(ctx, keys.Journal().Intents("t1"), "a", "b").Err())
	must(rdb.Set(ctx, keys.Answered("t1"), "1", time.Minute).Err())
	must(rdb.Set(ctx, keys.Approvals().Pending("agent-1", "chat"), "req-1", time.Minute).Err())
	must(s.Threads.Keep(ctx, ThreadOf{Hash: "h1"}, "conv-1"))

	sr = s.ReadStart(ctx, r)
	if b, found, err := sr.Record(); !found || string(b) != `{"task_id":"t1"}` || err != nil {
		t.Errorf("Record() = %q, %v, %v", b, found, err)
	}
	if ans, err := sr.Answered(); !ans || err != nil {
		t.Errorf("Answered() = %v, %v; want true", ans, err)
	}
	if in, err := sr.Intents(); fmt.Sprint(in) != "[a b]" || err != nil {
		t.Errorf("Intents() = %q, %v", in, err)
	}
	if p, err := sr.Pending(); p != "req-1" || err != nil {
		t.Errorf("Pending() = %q, %v", p, err)
	}
	if th, read := sr.ThreadRead(); th != "conv-1" || !read || sr.Thread() != th {
		t.Errorf("ThreadRead() = %q, %v; Thread() = %q", th, read, sr.Thread())
	}

	// Not asked: neither the pending request nor the thread is read.
	sr = s.ReadStart(ctx, StartRead{TaskID: "t1"})
	if p, err := sr.Pending(); p != "" || err != nil {
		t.Errorf("not asked: Pending() = %q, %v", p, err)
	}
	if th, read := sr.ThreadRead(); th != "" || read {
		t.Errorf("not asked: ThreadRead() = %q, %v; want not read", th, read)
	}
}
