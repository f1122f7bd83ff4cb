package queue

// The journal's keys, for tests that look at Redis directly (the package
// itself reaches them only through store.Journal).

func (j *Journal) recordKey(taskID string) string  { return j.st.Keys.JournalTurn(taskID) }
func (j *Journal) intentsKey(taskID string) string { return j.st.Keys.JournalIntents(taskID) }
func (j *Journal) otidKey(otid string) string      { return j.st.Keys.JournalOtid(otid) }
func (j *Journal) indexKey(f Filter) string        { return j.st.Keys.JournalIndex(journalIndexName(f)) }
