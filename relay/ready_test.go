package relay_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// TestReadyFollowsRedis: a relay is ready once its lease rounds reach Redis,
// not ready within seconds of Redis going away, and ready again when it is
// back.
func TestReadyFollowsRedis(t *testing.T) {
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	r := relay.New(relay.Config{Redis: rdb, Prefix: "ready:", Logger: slog.New(slog.DiscardHandler),
		Adapters: map[string]relay.Adapter{"fake": fakeplatform.New(relay.Limits{})}})
	if r.Ready() == nil {
		t.Fatal("ready before Run")
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = r.Run(ctx, relay.RunConfig{LeaseTTL: time.Second, Shards: 4}) }()
	defer func() { cancel(); <-done }()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not %s within 10s", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	waitFor("ready", func() bool { return r.Ready() == nil })
	if err := red.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped := time.Now()
	waitFor("unready after Redis stopped", func() bool { return r.Ready() != nil })
	t.Logf("unready %v after Redis stopped: %v", time.Since(stopped).Round(time.Millisecond), r.Ready())
	if err := red.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor("ready again", func() bool { return r.Ready() == nil })
}
