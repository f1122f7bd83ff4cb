package queue

import (
	"context"

	"github.com/lettaq/lettaq/queue/internal/cancelsub"
)

// The worker's side of a cancel (Client.Cancel; see cancel.go).
//
// A turn learns of its cancel three ways: its attempt's start reads the
// record (with the start's other reads, before the ordering acquire can put
// it back); the worker's subscription to the cancel channel hears the task
// id while the attempt runs (and reads the records of its running turns
// whenever it (re)subscribes, for what it missed); beforeSend reads it again
// in the intent's round trip. Then:
//
//   - nothing was sent yet (no intent, no run): the turn ends at once,
//     cancelled (endCancelled, or cancelWaiting when it is not its chat's
//     turn), never sent;
//   - about to send: beforeSend refuses, the turn ends cancelled;
//   - its run is underway (streaming, followed after a lost stream, or found
//     by the attempt that recovers a turn whose worker died): the worker asks
//     Letta to cancel it (askLetta: the conversation's cancel, or in agent
//     mode the agent endpoint's cancel of the run, once its id is known), and
//     lets the run end as Letta ends it: the stream (or the run, polled) says
//     cancelled, and the turn ends cancelled with what the agent had said; a
//     run that ended first is answered as usual (cancelEnds).
//
// A cancelled turn's attempt returns nil with its result written (outcome
// cancelled): the task completes, never retried, and counts as processed,
// not failed, in Asynq's metrics.

// cancelSubscriber is the worker's subscription to the cancel channel
// (queue/internal/cancelsub): a cancel of a turn this worker runs is noted
// on the turn (cancel.Turn.NoteJSON); on every (re)subscription the records of the
// running turns are read, for the cancels published while the worker was
// not subscribed (cancel.Running).
func (w *Worker) cancelSubscriber() *cancelsub.Subscriber {
	return &cancelsub.Subscriber{Subscribe: w.replies.st.SubscribeCancels, Resync: w.attempts.Cancels.Resync, Heard: w.attempts.Cancels.Heard}
}

// watchCancels follows the cancel channel until ctx ends.
func (w *Worker) watchCancels(ctx context.Context) { w.cancelSubscriber().Run(ctx) }
