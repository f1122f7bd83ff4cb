package attempt

import (
	"sync/atomic"
	"time"
)

// Observer is told what the worker does, for metrics. Methods are called
// from handler goroutines and must be fast and safe for concurrent use.
// Embed queue.NopObserver to implement only some of them.
type Observer interface {
	// TaskStarted: an attempt of a turn began. attempt is 1-based;
	// queueWait is from enqueue to this start.
	TaskStarted(queue string, attempt int, queueWait time.Duration)
	// StreamTimeout: a stream clock ("connect", "stall", "total") ended a
	// read.
	StreamTimeout(clock string)
	// Continuation: an attempt followed a lost run with this many polls
	// and stream resumes.
	Continuation(polls, resumes int)
	// Resend: the resend gate decided ("resent" or "forbidden").
	Resend(decision string)
	// AttemptFinished: an attempt ended. result is "done" (the turn is
	// finished), "retry", "busy" (put back: the Letta thread was busy, or
	// it waits for its chat's approval request), "archived" or "taken_over"
	// (another worker continues the turn: this worker was taken for dead,
	// see takeover.go). It follows the attempt's TaskStarted, once: a look
	// at a turn that ends before its attempt starts (an unusable payload, a
	// start whose reads from Redis failed, a turn that waits for the turn
	// ahead of it or was merged into another) is told neither, so that
	// started less finished is the attempts in flight.
	AttemptFinished(queue, result string, duration time.Duration)
	// TurnFinished: a turn reached its end. outcome is one of the journal
	// outcomes (answered, approval_required, failed, cancelled); latency is from
	// enqueue to the end; ttft from enqueue to the first answer token (0
	// when none was seen).
	TurnFinished(queue, outcome string, latency, ttft time.Duration)
}

// observed is the Observer as one attempt tells it: TaskStarted once,
// and AttemptFinished only after it, once. A look at a turn that ends
// before its attempt starts (a start whose reads failed, a turn that waits
// for its line or was merged into another: none leaves an attempt in the
// journal either) is told neither, so that an observer counting attempts in
// flight (started less finished) never counts one that did not start, nor
// one twice. TurnFinished and the rest pass through.
type observed struct {
	Observer
	state atomic.Uint32 // attemptNew, attemptRunning, attemptEnded
}

const (
	attemptNew uint32 = iota
	attemptRunning
	attemptEnded
)

func (o *observed) TaskStarted(queue string, attempt int, queueWait time.Duration) {
	if o.state.CompareAndSwap(attemptNew, attemptRunning) {
		o.Observer.TaskStarted(queue, attempt, queueWait)
	}
}

func (o *observed) attemptFinished(queue, result string, d time.Duration) {
	if o.state.CompareAndSwap(attemptRunning, attemptEnded) {
		o.Observer.AttemptFinished(queue, result, d)
	}
}
