package queue

import (
	"sync/atomic"
	"time"
)

// attemptObs is the Observer as one attempt tells it: TaskStarted once,
// and AttemptFinished only after it, once. A look at a turn that ends
// before its attempt starts (a start whose reads failed, a turn that waits
// for its line or was merged into another: none leaves an attempt in the
// journal either) is told neither, so that an observer counting attempts in
// flight (started less finished) never counts one that did not start, nor
// one twice. TurnFinished and the rest pass through.
type attemptObs struct {
	Observer
	state atomic.Uint32 // attemptNew, attemptRunning, attemptEnded
}

const (
	attemptNew uint32 = iota
	attemptRunning
	attemptEnded
)

func (o *attemptObs) TaskStarted(queue string, attempt int, queueWait time.Duration) {
	if o.state.CompareAndSwap(attemptNew, attemptRunning) {
		o.Observer.TaskStarted(queue, attempt, queueWait)
	}
}

func (o *attemptObs) AttemptFinished(queue, result string, d time.Duration) {
	if o.state.CompareAndSwap(attemptRunning, attemptEnded) {
		o.Observer.AttemptFinished(queue, result, d)
	}
}
