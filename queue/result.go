package queue

import "github.com/lettaq/lettaq/queue/internal/attempt"

// TurnResult is what a finished turn writes as its Asynq task result
// (Inspector.GetTaskInfo(queue, id).Result), as JSON: a one-line summary,
// the ids, the outcome, the answer, the merged task ids and the timings.
type TurnResult = attempt.TurnResult
