package store

import (
	"github.com/lettaq/lettaq/queue/shard"
)

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "lettaq:"

// Keys builds every Redis key lettaq keeps (but Asynq's and the ordering
// package's). Changing a key's format here changes it for a deployment's
// existing data: keep them.
//
// With one shard (Layout unset, or N = 1) every key is under Prefix. With
// more, a chat's keys are under its shard's prefix (shard.Layout.Prefix):
// the per-chat keys (its reply stream, notify markers, thread, approval
// pending in its own conversation) by the chat's shard, the per-task keys
// (seq, markers, journal record, intents, runners, otid keys, approval
// request, cancel record, park keys) by the shard the task id names
// (shard.Layout.OfTask: a turn's id names its chat's shard), so that every
// script and MULTI over one turn's keys and its chat's stays in one slot.
// What stays under Prefix: the takeover registry, the readiness keys, the
// cancel channel, the park index and approvals pending on a thread that
// chats share (the agent's, or a conversation a payload names).
type Keys struct {
	Prefix string
	// Layout is the deployment's shards (zero: one, under Prefix); with
	// N > 1 its base prefix is Prefix.
	Layout shard.Layout
}

// Sharded reports whether the keys spread over more than one shard.
func (k Keys) Sharded() bool { return k.Layout.N() > 1 }

// ChatPrefix is the prefix of the keys of the chat (integration, chat id).
func (k Keys) ChatPrefix(integration, chatID string) string {
	if !k.Sharded() {
		return k.Prefix
	}
	return k.Layout.Prefix(k.Layout.Of(integration, chatID))
}

// TaskPrefix is the prefix of the keys of a task: the shard's its id names
// (shard 0's when it names none, so that a task's keys always share a slot
// with one shard's indexes).
func (k Keys) TaskPrefix(taskID string) string {
	if !k.Sharded() {
		return k.Prefix
	}
	return k.Layout.Prefix(k.ShardOfTask(taskID))
}

// ShardOfTask is the shard of a task's keys (0 with one shard, or for an
// id that names none).
func (k Keys) ShardOfTask(taskID string) int {
	if !k.Sharded() {
		return 0
	}
	i, _ := k.Layout.OfTask(taskID)
	return i
}

// ShardOfKey is the shard whose prefix key is under (0 with one shard, or
// for a key under none).
func (k Keys) ShardOfKey(key string) int {
	if !k.Sharded() {
		return 0
	}
	i, _ := k.Layout.OfTask(key) // (the first hash tag names the shard, as in a task id)
	return i
}

// Shards is the number of shards the keys spread over (at least 1).
func (k Keys) Shards() int { return max(k.Layout.N(), 1) }

// ShardPrefix is shard i's prefix (Prefix with one shard).
func (k Keys) ShardPrefix(i int) string {
	if !k.Sharded() {
		return k.Prefix
	}
	return k.Layout.Prefix(i)
}

// Replies is the reply stream of a conversation (integration, chat id).
func (k Keys) Replies(integration, chatID string) string {
	return k.ChatPrefix(integration, chatID) + "replies:" + integration + ":" + chatID
}

// Seq is the counter of a task's reply events.
func (k Keys) Seq(taskID string) string { return k.TaskPrefix(taskID) + "seq:" + taskID }

// Emitted records, per writer of a task's events (an attempt, or one
// Replies.Emit call), the last event it wrote: its number, entry id and
// seq (a hash), so that an event sent again (its reply lost, the client
// retried) is not written twice.
func (k Keys) Emitted(taskID string) string { return k.TaskPrefix(taskID) + "emitted:" + taskID }

// Answered marks that a task's final event is written.
func (k Keys) Answered(taskID string) string { return k.TaskPrefix(taskID) + "answered:" + taskID }

// Accepted marks that a task's accepted event is written.
func (k Keys) Accepted(taskID string) string { return k.TaskPrefix(taskID) + "accepted:" + taskID }

// Notified marks that the notify of key was written into the reply stream
// of the conversation (integration, chat id): its entry id, the sha256 of
// its text and the token of the call that wrote it (see NotifyOnce). A key
// holds no ':' (queue.Notice.Validate), so that the last ':' ends the chat id.
func (k Keys) Notified(integration, chatID, key string) string {
	return k.ChatPrefix(integration, chatID) + "notified:" + integration + ":" + chatID + ":" + key
}

// Journal names the journal's keys.
func (k Keys) Journal() JournalKeys { return JournalKeys{k} }

// Approvals names the keys of approval requests.
func (k Keys) Approvals() ApprovalKeys { return ApprovalKeys{k} }

// Park names the keys of parked turns.
func (k Keys) Park() ParkKeys { return ParkKeys{k} }

// Thread keeps the Letta conversation id of a lettaq conversation (hash:
// of the agent and the chat), in the chat's shard. It never expires.
func (k Keys) Thread(c ThreadOf) string {
	p := k.ChatPrefix(c.Integration, c.ChatID)
	if p == "" {
		p = DefaultPrefix
	}
	return p + "thread:" + c.Hash
}

// ThreadLock serialises creating the Letta conversation of c.
func (k Keys) ThreadLock(c ThreadOf) string { return k.Thread(c) + ":lock" }

// ThreadOf names the thread of a chat: its hash (of the agent and the
// chat) and the chat, whose shard keeps it.
type ThreadOf struct{ Integration, ChatID, Hash string }
