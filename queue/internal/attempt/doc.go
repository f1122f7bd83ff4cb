// Package attempt is one attempt of a turn: the worker's asynq handler
// (queue.Worker.processTask) hands it each task through Parts.Process, and
// the attempt goes one way through its steps, each a part of its own:
//
//   - the start (Pipeline: start.go, gates.go, steps.go): the reads in one
//     round trip, the gates (its chat's line, an open approval, a cancel,
//     the takeover fence), the journal record;
//   - the run at Letta (lettaRun, with the chat's Letta conversation from
//     Threads): the work context, the checks before each send, the stream's
//     state and live view; it leaves a runEnd;
//   - the end as a value (endOf: a pure function from the run's decision to
//     the final event, the journal's outcome and what Asynq is told);
//   - the end applied (completer, and Waiting for an attempt that waits):
//     the final event and the merged messages', the journal record, the
//     task's result, the line's release or park, the approval's record, the
//     metrics, and the error Asynq is answered with (RetryDelay and
//     IsFailure read it).
//
// What the worker gives every attempt is Parts: a small Config, the reply
// streams and the journal through narrow views (replyWriter, journalWriter), the
// lines, approvals, takeover registry and writer, and the running turns for
// the cancel channel. Nothing here calls back into package queue, which
// names the attempt's public types as aliases (queue.Observer, TurnResult,
// ThreadMode, CancelObserver).
package attempt
