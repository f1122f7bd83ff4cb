// Package attempt is one attempt of a turn, as far as it has left package
// queue: its run at Letta (LettaRun: the work context, the chat's Letta
// conversation through Threads, the checks before each send, the stream's
// state and live view, and the decision it hands its Ender), how an attempt
// ends (EndOf, a pure function from the run's decision to the final event,
// the journal's outcome and what Asynq is told), the errors its handler
// answers Asynq with (RetryDelay and IsFailure read them), its identity and
// log (IDs, NewLogger), and the worker's Observer as one attempt tells it
// (Observed).
//
// The rest of the pipeline (the start and its gates, the completer that
// applies the end) is still in package queue, which builds an attempt per
// task (Worker.processTask) and gives the run what it needs through narrow
// interfaces (Intents, RecordSaver, Ender); nothing here calls back into
// queue.
package attempt
