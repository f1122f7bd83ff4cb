package live

import (
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/record"
)

type told struct {
	mu    sync.Mutex
	evs   []record.ReplyEvent
	lazy  []bool
	marks []string
}

func (o *told) emit(ev record.ReplyEvent, lazy bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.evs = append(o.evs, ev)
	o.lazy = append(o.lazy, lazy)
}

func (o *told) mark(p string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.marks = append(o.marks, p)
}

func (o *told) of(typ record.EventType) []record.ReplyEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []record.ReplyEvent
	for _, ev := range o.evs {
		if ev.Type == typ {
			out = append(out, ev)
		}
	}
	return out
}

func assistant(delta string) agentclient.Event {
	return agentclient.Event{Update: agentclient.Update{Step: 0, Kind: agentclient.StepAssistant, Delta: delta}}
}

// The continuation's activity becomes the chat's phase and a mark of the timeline; answer
// text goes out up to its last newline, the rest when the attempt finishes with a flush,
// and nothing after that.
func TestStreamTellsPhasesAndAnswerText(t *testing.T) {
	var o told
	var s Stream
	s.Start(time.Now(), time.Hour, time.Hour, o.emit, o.mark)
	defer s.StopHeartbeat()

	s.OnActivity(continuation.ActivityStreaming)
	if s.Activity() != continuation.ActivityStreaming {
		t.Fatalf("Activity = %q, want streaming", s.Activity())
	}
	ph := o.of(record.EventPhase)
	if len(ph) != 1 || ph[0].Phase != record.PhaseStreaming || o.lazy[0] {
		t.Fatalf("phase events = %+v (lazy %v), want one streaming, not lazy", ph, o.lazy)
	}
	if len(o.marks) != 1 || o.marks[0] != string(continuation.ActivityStreaming) {
		t.Fatalf("marks = %q, want [streaming]", o.marks)
	}

	if !s.FirstToken().IsZero() {
		t.Fatal("FirstToken set before any text")
	}
	st := agentclient.NewStreamState()
	s.OnEvent(assistant("Hel"), st)
	if s.FirstToken().IsZero() {
		t.Fatal("FirstToken not set by the first answer text")
	}
	if d := o.of(record.EventAnswerDelta); len(d) != 0 {
		t.Fatalf("deltas before a newline: %+v", d)
	}
	s.OnEvent(assistant("lo\nwor"), st)
	s.Finish(true)
	s.OnEvent(assistant("ld\n"), st)
	s.Finish(true)
	d := o.of(record.EventAnswerDelta)
	if len(d) != 2 || d[0].Text != "Hello\n" || d[1].Text != "wor" || d[0].Narration || d[1].Narration {
		t.Fatalf("deltas = %+v, want \"Hello\\n\" then \"wor\"", d)
	}
}

// A finish without a flush drops the text still held (a cancelled or failed turn).
func TestStreamFinishWithoutFlushDropsHeldText(t *testing.T) {
	var o told
	var s Stream
	s.Start(time.Now(), time.Hour, time.Hour, o.emit, o.mark)
	defer s.StopHeartbeat()
	s.OnEvent(assistant("half a line"), agentclient.NewStreamState())
	s.Finish(false)
	if d := o.of(record.EventAnswerDelta); len(d) != 0 {
		t.Fatalf("deltas = %+v, want none", d)
	}
}
