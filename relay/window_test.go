package relay_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// TestWindowWidth measures the one window a kill cannot be kept out of: from
// the platform's answer to a Send (step send.after) to its id stored in Redis
// (step savemsg.after), over 300 quick answers on this machine's Redis.
//
//	go test -run TestWindowWidth -v ./relay/
func TestWindowWidth(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	var sentAt time.Time
	var widths []time.Duration
	e.cfg.Step = func(step string) {
		switch step {
		case "send.after":
			sentAt = time.Now()
		case "savemsg.after":
			widths = append(widths, time.Since(sentAt))
		}
	}
	e.restart()
	for i := range 300 {
		a := ev(record.EventAnswer, fmt.Sprintf("t%d", i))
		a.Text = "answer"
		e.emit(a)
		e.drain()
	}
	if len(widths) != 300 {
		t.Fatalf("%d windows measured, want 300", len(widths))
	}
	slices.Sort(widths)
	t.Logf("window (send accepted → id stored), %d sends: p50 %v, p99 %v, max %v",
		len(widths), widths[len(widths)/2], widths[len(widths)*99/100], widths[len(widths)-1])
}
