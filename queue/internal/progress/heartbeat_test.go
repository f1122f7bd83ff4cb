package progress

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/testkit"
)

// TestHeartbeatsReuseAndKeepFields: a turn's heartbeats, written one round
// trip after another (each reusing the last's event), land in its stream
// with every field, including a run id learned between two beats.
func TestHeartbeatsReuseAndKeepFields(t *testing.T) {
	testkit.EachRedis(t, func(t *testing.T, b testkit.Backend) {
		wr, r, _ := gatedWriter(b, nil)
		c := Conversation{Integration: "test", ChatID: "beats"}
		p := wr.NewQueue(c, func(err error) { t.Error(err) }, nil)
		defer p.Close()
		var beats []*Event
		for i := range 4 {
			ev := ReplyEvent{Type: EventPhase, Phase: PhaseThinking, TaskID: "t-beats", Otid: "o", MessageID: "m",
				Elapsed: time.Duration(i+1) * 4 * time.Second}
			if i >= 2 {
				ev.RunID = "run-late"
			}
			p.PushLazy(ev)
			wr.mu.Lock()
			beats = append(beats, p.beat)
			wr.mu.Unlock()
			p.Flush(context.Background())
		}
		if beats[0] != beats[1] || beats[1] != beats[3] {
			t.Error("a written heartbeat's event was not reused")
		}
		evs, _, err := r.Read(context.Background(), c, "0", 100, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) != 4 {
			t.Fatalf("%d events, want 4", len(evs))
		}
		for i, ev := range evs {
			wantRun := ""
			if i >= 2 {
				wantRun = "run-late"
			}
			if ev.Type != EventPhase || ev.Phase != PhaseThinking || ev.TaskID != "t-beats" || ev.Otid != "o" || ev.MessageID != "m" ||
				ev.RunID != wantRun || ev.Seq != int64(i+1) || ev.Elapsed != time.Duration(i+1)*4*time.Second || ev.Time.IsZero() {
				t.Errorf("event %d: %+v", i, ev)
			}
		}
	})
}
