package main

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestRelayBenchSmall runs the relay measurement at a small size (the full run is by hand:
// docs/relay.md, Figures) on a redis-server of its own.
func TestRelayBenchSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Skip("no redis-server on PATH")
	}
	c := RelayConfig{Chats: 200, Deltas: 5, Replicas: []int{1, 2}, Quick: 20, Streamed: 5, StreamFor: 2 * time.Second}
	r, err := RunRelay(context.Background(), c, testWriter{t})
	if err != nil {
		t.Fatal(err)
	}
	table := r.Table()
	t.Log("\n" + table)
	for _, x := range r.Runs {
		// A quick answer is one message and the status cleared; a streamed one is one
		// message, grown by edits.
		if x.QuickCalls["send"] != 1 || x.QuickCalls["status clear"] != 1 {
			t.Errorf("%d replicas: calls per quick answer %v, want one send and one status clear", x.Replicas, x.QuickCalls)
		}
		if x.StreamCalls["send"] != 1 || x.StreamCalls["edit"] < 1 {
			t.Errorf("%d replicas: calls per streamed answer %v, want one send and edits", x.Replicas, x.StreamCalls)
		}
		if x.Events != c.Chats*(c.Deltas+2) || x.CatchUp <= 0 || x.BareTime <= 0 || x.HeapPerChat <= 0 || x.Reloaded != c.Chats {
			t.Errorf("%d replicas: incomplete figures %+v", x.Replicas, x)
		}
		if len(x.LagStart) != c.Quick+c.Streamed || len(x.LagFinal) != c.Quick+c.Streamed || len(x.LagDelta) != c.Streamed*c.Deltas {
			t.Errorf("%d replicas: lags of %d / %d / %d events", x.Replicas, len(x.LagStart), len(x.LagDelta), len(x.LagFinal))
		}
	}
	if !strings.Contains(table, "**2 replica(s)**") || !strings.Contains(table, "bare XREAD") {
		t.Errorf("incomplete table:\n%s", table)
	}
}
