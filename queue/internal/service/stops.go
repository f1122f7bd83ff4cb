package service

import (
	"context"
	"sync"
)

// Stops cancels the contexts of the handlers running at a shutdown. Asynq's BaseContext
// would do it, but every task's context would then be a child of that one cancelable
// context: Asynq's goroutine that waits for each handler makes the task's context, and
// registering it there (a lock and a map shared by every task) grows that goroutine's stack
// to 4 KiB, which it keeps for as long as the turn thinks. A handler registers its own
// context instead, on its own goroutine, whose stack is large at that point anyway.
type Stops struct {
	mu    sync.Mutex
	cause error // set by Stop: the shutdown began
	m     map[*stop]struct{}
}

type stop struct{ cancel context.CancelCauseFunc }

// Add returns a child of ctx that Stop cancels (at once if it was called), done, which
// unregisters and cancels it, and the child's cancel (for a cause of its own).
func (s *Stops) Add(ctx context.Context) (context.Context, func(), context.CancelCauseFunc) {
	c, cancel := context.WithCancelCause(ctx)
	e := &stop{cancel}
	s.mu.Lock()
	cause := s.cause
	if cause == nil {
		if s.m == nil {
			s.m = make(map[*stop]struct{})
		}
		s.m[e] = struct{}{}
	}
	s.mu.Unlock()
	if cause != nil {
		cancel(cause)
	}
	return c, func() {
		s.mu.Lock()
		delete(s.m, e)
		s.mu.Unlock()
		cancel(context.Canceled)
	}, cancel
}

// Stop cancels every registered context with cause, and every one added from now on (with
// the first Stop's cause).
func (s *Stops) Stop(cause error) {
	s.mu.Lock()
	if s.cause == nil {
		s.cause = cause
	}
	cause = s.cause
	es := make([]*stop, 0, len(s.m))
	for e := range s.m {
		es = append(es, e)
	}
	s.mu.Unlock()
	for _, e := range es {
		e.cancel(cause)
	}
}

func (s *Stops) registered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}
