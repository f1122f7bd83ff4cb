package store

import (
	"strings"
	"testing"

	"github.com/lettaq/lettaq/internal/hashtag"
	"github.com/lettaq/lettaq/queue/shard"
)

// TestKeys pins every key's format: a deployment's data lives under them,
// so a change here is a migration.
func TestKeys(t *testing.T) {
	k := Keys{Prefix: "p:"}
	for _, c := range []struct{ got, want string }{
		{k.Replies("tg", "42"), "p:replies:tg:42"},
		{k.Seq("t"), "p:seq:t"},
		{k.Emitted("t"), "p:emitted:t"},
		{k.Answered("t"), "p:answered:t"},
		{k.Accepted("t"), "p:accepted:t"},
		{k.JournalTurn("t"), "p:journal:turn:t"},
		{k.JournalIntents("t"), "p:journal:intents:t"},
		{k.JournalOtid("o"), "p:journal:otid:o"},
		{k.JournalRunners("t"), "p:journal:runners:t"},
		{k.JournalIndex("recent"), "p:journal:idx:recent"},
		{k.ApprovalRequest("t"), "p:approval:req:t"},
		{k.ApprovalOtid("o"), "p:approval:otid:o"},
		{k.ApprovalPending("a", "s"), "p:approval:pending:a:s"},
		{k.Thread(ThreadOf{"tg", "42", "h"}), "p:thread:h"},
		{k.ThreadLock(ThreadOf{"tg", "42", "h"}), "p:thread:h:lock"},
		{k.Ready("w1"), "p:ready:w1"},
		{Keys{}.Thread(ThreadOf{Hash: "h"}), "lettaq:thread:h"},
		{k.JournalOtidOf("t", "o"), "p:journal:otid:o"},
		{k.ApprovalOtidOf("t", "o"), "p:approval:otid:o"},
		{k.Cancel("t"), "p:cancel:t"},
		{k.ParkKey("t"), "p:park:t"},
		{k.ParkIndex(), "p:park:idx"},
	} {
		if c.got != c.want {
			t.Errorf("key %q, want %q", c.got, c.want)
		}
	}
}

// TestKeysSharded: with N shards a chat's keys are under its shard's
// prefix and a task's under the shard its id names, so that a turn's keys
// and its chat's share a slot; with one shard the layout changes no key.
func TestKeysSharded(t *testing.T) {
	one, _ := shard.New(1, "q", "p:")
	if a, b := (Keys{Prefix: "p:", Layout: one}), (Keys{Prefix: "p:"}); a.Replies("tg", "42") != b.Replies("tg", "42") ||
		a.Seq("turn:tg:42:m") != b.Seq("turn:tg:42:m") || a.JournalIndexIn(0, "recent") != b.JournalIndex("recent") {
		t.Errorf("one shard changed a key: %q", a.Replies("tg", "42"))
	}
	l, err := shard.New(8, "q", "{p}:")
	if err != nil {
		t.Fatal(err)
	}
	k := Keys{Prefix: "{p}:", Layout: l}
	sh := l.Of("tg", "42")
	task := l.TaskID(sh, "turn:tg:42:m1")
	want := hashtag.Slot(l.Prefix(sh))
	for _, key := range []string{k.Replies("tg", "42"), k.Notified("tg", "42", "n"), k.Thread(ThreadOf{"tg", "42", "h"}),
		k.ApprovalPending("a", "chat:tg:42"), k.Seq(task), k.Emitted(task), k.Answered(task), k.Accepted(task),
		k.JournalTurn(task), k.JournalIntents(task), k.JournalRunners(task), k.JournalOtidOf(task, "o"),
		k.JournalIndexIn(sh, "recent"), k.ApprovalRequest(task), k.ApprovalOtidOf(task, "o"), k.Cancel(task),
		k.ParkKey(task), k.ParkTook(task), k.ParkWaiters(task), k.Seq("answer:" + task)} {
		if got := hashtag.Slot(key); got != want {
			t.Errorf("%s: slot %d, not its shard's %d", key, got, want)
		}
	}
	for _, key := range []string{k.ApprovalPending("a", "agent"), k.ParkIndex(), k.Ready("w"), k.Takeover().Workers()} {
		if !strings.HasPrefix(key, "{p}:") {
			t.Errorf("%s: a global key not under the base prefix", key)
		}
	}
}
