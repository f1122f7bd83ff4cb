package queue

// The journal's keys, for tests that look at Redis directly (the package
// itself reaches them only through store.Journal).

func (j *Journal) recordKey(taskID string) string  { return j.st.Keys.Journal().Turn(taskID) }
func (j *Journal) intentsKey(taskID string) string { return j.st.Keys.Journal().Intents(taskID) }
func (j *Journal) otidKey(otid string) string      { return j.st.Keys.Journal().Otid(otid) }
func (j *Journal) indexKey(f Filter) string        { return j.st.Keys.Journal().Index(journalIndexName(f)) }
