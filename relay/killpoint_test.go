package relay_test

import (
	"fmt"
	"net/http/httptest"
	"testing"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/killtest"
)

// TestKillAtEveryStepShowsEachMessageOnce SIGKILLs the relay process at every
// step of a turn (each occurrence of each step, until a run does not reach
// it), lets a second relay take the shard over, and counts what the fake
// platform received: every scenario ends showing exactly its messages, each
// created once, except a kill between the platform's accept of a new message
// and the store of its id (step send.after): the one window, where the
// message is created twice.
func TestKillAtEveryStepShowsEachMessageOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the relay binary a few hundred times")
	}
	results := killtest.Run(t, killtest.Scenarios(), func(t *testing.T) killtest.Platform {
		plat := fakeplatform.New(relay.Limits{PartLimit: killtest.PartLimit})
		srv := httptest.NewServer(plat.Handler())
		return killtest.Platform{
			Fake: plat, Conv: record.Conversation{Integration: "fake", ChatID: "chat1"}, Close: srv.Close,
			Env: []string{"LETTAQ_RELAY_FAKE_URL=" + srv.URL, "LETTAQ_RELAY_FAKE_PART_LIMIT=" + fmt.Sprint(killtest.PartLimit)},
		}
	})
	var runs, windows int
	for _, r := range results {
		runs, windows = runs+r.Runs, windows+r.Windows
	}
	t.Logf("%d kill runs; %d landed in the window (killed after the platform's accept, before the id's save)", runs, windows)
}
