package store

// JournalKeys names the journal's keys: a task's record, intents and
// runners in the task's shard, the otid keys and the per-shard indexes.
type JournalKeys struct{ keys Keys }

// Turn is a task's journal record.
func (j JournalKeys) Turn(taskID string) string {
	return j.keys.TaskPrefix(taskID) + "journal:turn:" + taskID
}

// Intents is the list of a task's send intents.
func (j JournalKeys) Intents(taskID string) string {
	return j.keys.TaskPrefix(taskID) + "journal:intents:" + taskID
}

// Runners numbers a task's runners: field "next" the last number
// given to a runner at its start, "saved" the highest of a runner whose
// save wrote the record (see JournalSave).
func (j JournalKeys) Runners(taskID string) string {
	return j.keys.TaskPrefix(taskID) + "journal:runners:" + taskID
}

// Otid maps an otid to its task, in shard 0 (with one shard: the
// only one); OtidOf names it in the task's shard, where a save
// writes it.
func (j JournalKeys) Otid(otid string) string { return j.keys.ShardPrefix(0) + "journal:otid:" + otid }

// OtidOf is the otid key of taskID's turn, in the task's shard.
func (j JournalKeys) OtidOf(taskID, otid string) string {
	return j.keys.TaskPrefix(taskID) + "journal:otid:" + otid
}

// OtidIn is otid's key in shard i.
func (j JournalKeys) OtidIn(i int, otid string) string {
	return j.keys.ShardPrefix(i) + "journal:otid:" + otid
}

// Index is the journal's index of the records matching a filter
// ("recent": all of them), in shard 0 (with one shard: the only one).
func (j JournalKeys) Index(filter string) string { return j.IndexIn(0, filter) }

// IndexIn is shard i's index of filter: each shard indexes its own
// turns, and a query merges the shards' answers.
func (j JournalKeys) IndexIn(i int, filter string) string {
	return j.keys.ShardPrefix(i) + "journal:idx:" + filter
}
