// Package attempt is one attempt of a turn, as far as it has left package
// queue: its run at Letta (LettaRun: the work context, the chat's Letta
// conversation through Threads, the checks before each send, the stream's
// state and live view) and its end: EndOf decides from the run's decision
// (a pure function: the final event, the journal's outcome, what Asynq is
// told) and the Completer applies it (the final event and the merged
// messages', the journal record, the task's result, the line's release or
// park, the approval's record, the metrics); an attempt that waits behind
// an open approval or the turn ahead ends through Waiting. The RecordWriter
// saves the attempt's journal record; IDs and NewLogger stamp its lines;
// Observed is the worker's Observer as one attempt tells it; RetryDelay and
// IsFailure read the errors its handler answers Asynq with.
//
// What the worker gives every attempt is Parts: a small Config, the reply
// streams and the journal through narrow views (Replies, Journal), the
// lines and the approvals. The start of an attempt and its gates (the
// line's acquire, an open approval, a cancel, the takeover fence) are still
// package queue's turn, which builds the run and the completer and calls
// down into this package; nothing here calls back into queue.
package attempt
