package store

import "testing"

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
