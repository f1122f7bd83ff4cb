// Package attempt is one attempt of a turn: how it ends (EndOf, a pure
// function from the run's decision to the final event, the journal's
// outcome and what Asynq is told), the errors its handler answers Asynq with
// (RetryDelay and IsFailure read them), its identity and log (IDs,
// NewLogger), and the worker's Observer as one attempt tells it (Observed).
//
// The attempt's pipeline (the start, the gates, the run at Letta, the
// completer that applies the end) is still in package queue, which builds
// an attempt per task (Worker.processTask) and calls down into this
// package; nothing here calls back into queue.
package attempt
