// Package cancelsub is the worker's subscription to the cancel channel (Asynq's subscriber
// does the same for its own task cancellations): every cancel published while it is
// subscribed reaches Heard; on every (re)subscription Resync runs, so that what was published
// while it was not subscribed (before its start, or while Redis was away) is read from the
// cancel records instead.
package cancelsub

import (
	"context"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/service"
)

// Subscriber follows the cancel channel between Start and Stop.
type Subscriber struct {
	// Subscribe subscribes to the channel (go-redis resubscribes by itself after a lost
	// connection, and says so with a *redis.Subscription).
	Subscribe func(ctx context.Context) *redis.PubSub
	// Resync runs on every (re)subscription.
	Resync func(ctx context.Context)
	// Heard runs for every message: its payload is the cancelled turn's task id.
	Heard func(ctx context.Context, taskID string)

	loop service.Loop
}

// Start subscribes in the background and returns at once.
func (s *Subscriber) Start(ctx context.Context) error {
	s.loop.Go(ctx, s.Run)
	return nil
}

// Stop ends the subscription and waits for a Resync or Heard under way.
func (s *Subscriber) Stop() { s.loop.Stop() }

// Run follows the channel until ctx ends (Start runs it in the background).
func (s *Subscriber) Run(ctx context.Context) {
	ps := s.Subscribe(ctx)
	defer func() { _ = ps.Close() }()
	ch := ps.ChannelWithSubscriptions()
	for {
		select {
		case <-ctx.Done():
			return
		case m, ok := <-ch:
			if !ok {
				return
			}
			switch m := m.(type) {
			case *redis.Subscription:
				s.Resync(ctx)
			case *redis.Message:
				s.Heard(ctx, m.Payload)
			}
		}
	}
}
