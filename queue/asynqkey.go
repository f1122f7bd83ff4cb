package queue

// asynqTaskKey is the key of Asynq's hash of a task (asynq v0.26,
// internal/base.TaskKey), the one place lettaq spells a key of Asynq's: the
// worker writes a finished turn's result into it (store.WriteResult, what
// Asynq's ResultWriter.Write does) in the round trip of the turn's other
// writes, which saves a round trip per turn (issue 28: through
// ResultWriter, `go run ./integration/bench -latency 0 -throughput 2000
// -concurrent 0` measured 4.9 round trips per instant turn instead of 3.9,
// 362 µs of Redis CPU instead of 296, and 910 turns/s instead of 1450).
// TestAsynqTaskKey fails when the pinned Asynq no longer keeps a task's
// result there.
func asynqTaskKey(qname, taskID string) string { return "asynq:{" + qname + "}:t:" + taskID }
