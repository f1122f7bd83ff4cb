package queue

import (
	"time"

	"github.com/lettaq/lettaq/queue/internal/attempt"
)

// Observer is told what the worker does, for metrics (see
// queue/internal/attempt for what each method is told). Methods are called
// from handler goroutines and must be fast and safe for concurrent use.
// Embed NopObserver to implement only some of them.
type Observer = attempt.Observer

// NopObserver observes nothing. Embed it in an Observer.
type NopObserver struct{}

func (NopObserver) TaskStarted(string, int, time.Duration)                    {}
func (NopObserver) StreamTimeout(string)                                      {}
func (NopObserver) Continuation(int, int)                                     {}
func (NopObserver) Resend(string)                                             {}
func (NopObserver) AttemptFinished(string, string, time.Duration)             {}
func (NopObserver) TurnFinished(string, string, time.Duration, time.Duration) {}

// CancelObserver is an Observer that is also told of cancelled turns (the
// phase is one of the record.CancelPhase… constants). A worker's Observer that
// implements it is told.
type CancelObserver = attempt.CancelObserver
