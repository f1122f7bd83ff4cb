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
		{k.Journal().Turn("t"), "p:journal:turn:t"},
		{k.Journal().Intents("t"), "p:journal:intents:t"},
		{k.Journal().Otid("o"), "p:journal:otid:o"},
		{k.Journal().Runners("t"), "p:journal:runners:t"},
		{k.Journal().Index("recent"), "p:journal:idx:recent"},
		{k.Approvals().Request("t"), "p:approval:req:t"},
		{k.Approvals().Otid("o"), "p:approval:otid:o"},
		{k.Approvals().Pending("a", "s"), "p:approval:pending:a:s"},
		{k.Thread(ThreadOf{"tg", "42", "h"}), "p:thread:h"},
		{k.ThreadLock(ThreadOf{"tg", "42", "h"}), "p:thread:h:lock"},
		{k.Ready("w1"), "p:ready:w1"},
		{Keys{}.Thread(ThreadOf{Hash: "h"}), "lettaq:thread:h"},
		{k.Journal().OtidOf("t", "o"), "p:journal:otid:o"},
		{k.Approvals().OtidOf("t", "o"), "p:approval:otid:o"},
		{k.Cancel("t"), "p:cancel:t"},
		{k.Park().Record("t"), "p:park:t"},
		{k.Park().Index(), "p:park:idx"},
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
		a.Seq("turn:tg:42:m") != b.Seq("turn:tg:42:m") || a.Journal().IndexIn(0, "recent") != b.Journal().Index("recent") {
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
		k.Approvals().Pending("a", "chat:tg:42"), k.Seq(task), k.Emitted(task), k.Answered(task), k.Accepted(task),
		k.Journal().Turn(task), k.Journal().Intents(task), k.Journal().Runners(task), k.Journal().OtidOf(task, "o"),
		k.Journal().IndexIn(sh, "recent"), k.Approvals().Request(task), k.Approvals().OtidOf(task, "o"), k.Cancel(task),
		k.Park().Record(task), k.Park().Took(task), k.Park().Waiters(task), k.Seq("answer:" + task)} {
		if got := hashtag.Slot(key); got != want {
			t.Errorf("%s: slot %d, not its shard's %d", key, got, want)
		}
	}
	for _, key := range []string{k.Approvals().Pending("a", "agent"), k.Park().Index(), k.Ready("w"), k.Takeover().Workers()} {
		if !strings.HasPrefix(key, "{p}:") {
			t.Errorf("%s: a global key not under the base prefix", key)
		}
	}
}
