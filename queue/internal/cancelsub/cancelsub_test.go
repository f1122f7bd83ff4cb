package cancelsub

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// The subscriber resyncs when it subscribes, hands every published task id to Heard, and
// after Stop hears nothing more.
func TestSubscriberHearsAndResyncs(t *testing.T) {
	m := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { _ = rdb.Close() })
	resyncs := make(chan struct{}, 4)
	heard := make(chan string, 4)
	s := &Subscriber{
		Subscribe: func(ctx context.Context) *redis.PubSub { return rdb.Subscribe(ctx, "cancel") },
		Resync:    func(context.Context) { resyncs <- struct{}{} },
		Heard:     func(_ context.Context, id string) { heard <- id },
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-resyncs // subscribed: what was published before is read now
	if err := rdb.Publish(context.Background(), "cancel", "turn:a").Err(); err != nil {
		t.Fatal(err)
	}
	if id := <-heard; id != "turn:a" {
		t.Errorf("heard %q, want turn:a", id)
	}
	s.Stop()
	s.Stop()
	// Stop closed the subscription: Redis lets it go (once it has read the close).
	deadline := time.Now().Add(5 * time.Second)
	for m.PubSubNumSub("cancel")["cancel"] != 0 {
		if time.Now().After(deadline) {
			t.Fatal("still subscribed 5 s after Stop")
		}
		runtime.Gosched()
	}
}
