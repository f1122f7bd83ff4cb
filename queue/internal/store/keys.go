package store

// DefaultPrefix is the key prefix when none is configured.
const DefaultPrefix = "lettaq:"

// Keys builds every Redis key lettaq keeps (but Asynq's and the ordering
// package's), each under Prefix. Changing a key's format here changes it
// for a deployment's existing data: keep them.
type Keys struct {
	Prefix string
}

// Replies is the reply stream of a conversation (integration, chat id).
func (k Keys) Replies(integration, chatID string) string {
	return k.Prefix + "replies:" + integration + ":" + chatID
}

// Seq is the counter of a task's reply events.
func (k Keys) Seq(taskID string) string { return k.Prefix + "seq:" + taskID }

// Emitted records, per writer of a task's events (an attempt, or one
// Replies.Emit call), the last event it wrote: its number, entry id and
// seq (a hash), so that an event sent again (its reply lost, the client
// retried) is not written twice.
func (k Keys) Emitted(taskID string) string { return k.Prefix + "emitted:" + taskID }

// Answered marks that a task's final event is written.
func (k Keys) Answered(taskID string) string { return k.Prefix + "answered:" + taskID }

// Accepted marks that a task's accepted event is written.
func (k Keys) Accepted(taskID string) string { return k.Prefix + "accepted:" + taskID }

// Notified marks that the notify of key was written into the reply stream
// of the conversation (integration, chat id): its entry id, the sha256 of
// its text and the token of the call that wrote it (see NotifyOnce). A key
// holds no ':' (queue.Notice.Validate), so that the last ':' ends the chat id.
func (k Keys) Notified(integration, chatID, key string) string {
	return k.Prefix + "notified:" + integration + ":" + chatID + ":" + key
}

// JournalTurn is a task's journal record.
func (k Keys) JournalTurn(taskID string) string { return k.Prefix + "journal:turn:" + taskID }

// JournalIntents is the list of a task's send intents.
func (k Keys) JournalIntents(taskID string) string { return k.Prefix + "journal:intents:" + taskID }

// JournalRunners numbers a task's runners: field "next" the last number
// given to a runner at its start, "saved" the highest of a runner whose
// save wrote the record (see JournalSave).
func (k Keys) JournalRunners(taskID string) string { return k.Prefix + "journal:runners:" + taskID }

// JournalOtid maps an otid to its task.
func (k Keys) JournalOtid(otid string) string { return k.Prefix + "journal:otid:" + otid }

// JournalIndex is the journal's index of the records matching a filter
// ("recent": all of them).
func (k Keys) JournalIndex(filter string) string { return k.Prefix + "journal:idx:" + filter }

// ApprovalRequest is the pending approval of a request's task.
func (k Keys) ApprovalRequest(taskID string) string { return k.Prefix + "approval:req:" + taskID }

// ApprovalOtid maps a request's otid to its task.
func (k Keys) ApprovalOtid(otid string) string { return k.Prefix + "approval:otid:" + otid }

// ApprovalPending is the pending approval of an agent in a scope.
func (k Keys) ApprovalPending(agentID, scope string) string {
	return k.Prefix + "approval:pending:" + agentID + ":" + scope
}

// Thread keeps the Letta conversation id of a lettaq conversation (hash:
// of the agent and the conversation). It never expires.
func (k Keys) Thread(hash string) string {
	if k.Prefix == "" {
		k.Prefix = DefaultPrefix
	}
	return k.Prefix + "thread:" + hash
}

// ThreadLock serialises creating the Letta conversation of hash.
func (k Keys) ThreadLock(hash string) string { return k.Thread(hash) + ":lock" }
