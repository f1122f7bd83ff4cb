package live

import (
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/queue/internal/pace"
	"github.com/lettaq/lettaq/queue/internal/tools"
	"github.com/lettaq/lettaq/queue/record"
)

// Stream turns what an attempt's run at Letta does into its chat's progress: the phase
// its heartbeat repeats, the answer (and reasoning) text as answer_delta events, each
// tool call and return once, and the marks of the journal's timeline. The attempt
// gives it two functions at Start and tells it what happens; Stream never writes
// anything itself.
//
// OnActivity, OnEvent and the heartbeat's and delta pump's own goroutines may run at
// once; OnActivity and OnEvent are called by the run's goroutine, never concurrently.
type Stream struct {
	emit     func(ev record.ReplyEvent, lazy bool) // queues a progress event (lazy: may wait for company)
	mark     func(phase string)                    // notes a phase in the journal's timeline
	hb       *pace.Heartbeat[record.ReplyPhase]
	deltas   *deltaPump
	activity continuation.Activity
	stage    agentclient.Stage
	first    time.Time // the answer's first token
	tools    tools.Calls
}

// Start starts the heartbeat (its elapsed time counted from since, repeated every
// interval) and the delta pump (text without a newline waits at most maxAge).
func (s *Stream) Start(since time.Time, interval, maxAge time.Duration, emit func(ev record.ReplyEvent, lazy bool), mark func(phase string)) {
	s.emit, s.mark = emit, mark
	var beat record.ReplyPhase // the phase last emitted (emits never overlap)
	s.hb = pace.NewHeartbeatSince(since, interval, func(phase record.ReplyPhase, elapsed time.Duration) {
		ev := record.ReplyEvent{Type: record.EventPhase, Phase: phase, Elapsed: elapsed}
		if phase == beat {
			// A repeat: it goes with the other turns' beats (lazyWindow).
			emit(ev, true)
			return
		}
		beat = phase
		emit(ev, false)
	})
	s.deltas = newDeltaPump(maxAge, func(text string, narration bool) {
		emit(record.ReplyEvent{Type: record.EventAnswerDelta, Text: text, Narration: narration}, false)
	})
}

// StopHeartbeat stops repeating the phase: the run is decided.
func (s *Stream) StopHeartbeat() { s.hb.Stop() }

// Finish stops the delta pump; with flush, the text it holds goes out first.
func (s *Stream) Finish(flush bool) { s.deltas.finish(flush) }

// Activity is the continuation's activity last told (OnActivity).
func (s *Stream) Activity() continuation.Activity { return s.activity }

// FirstToken is when the answer's first text came (zero: none yet).
func (s *Stream) FirstToken() time.Time { return s.first }

// Tools are the attempt's tool calls so far.
func (s *Stream) Tools() []*tools.Call { return s.tools.All() }

// OnActivity notes what the continuation does now, and the phase the chat sees.
func (s *Stream) OnActivity(p continuation.Activity) {
	s.activity = p
	s.mark(string(p))
	switch p {
	case continuation.ActivityConnecting, continuation.ActivityResending:
		s.hb.Set(record.PhaseConnecting)
	case continuation.ActivityStreaming:
		s.hb.Set(record.PhaseStreaming)
	case continuation.ActivityRecovering:
		s.hb.Set(record.PhaseRecovering)
	case continuation.ActivityContinuing:
		s.hb.Set(record.PhaseContinuing)
	case continuation.ActivityRateLimited:
		s.hb.Set(record.PhaseRateLimited)
	case continuation.ActivityLettaDeploying:
		s.hb.Set(record.PhaseLettaDeploying)
	}
}

func replyPhaseOf(p agentclient.Stage) record.ReplyPhase {
	switch p {
	case agentclient.StageWaiting, agentclient.StageThinking:
		return record.PhaseThinking
	case agentclient.StageToolCall:
		return record.PhaseToolRunning
	case agentclient.StageAnswering:
		return record.PhaseStreaming
	}
	return ""
}

// OnEvent passes on an event of the agent's stream, st the stream's state after it.
func (s *Stream) OnEvent(ev agentclient.Event, st *agentclient.StreamState) {
	now := time.Now()
	u := ev.Update
	// Events leave in the order things happened at the agent: text said before a tool
	// call or a phase change is flushed before it, and a tool's call or return comes
	// before the phase it leads to.
	if u.Step >= 0 && (u.Kind == agentclient.StepToolCall || u.Kind == agentclient.StepToolReturn) {
		s.toolStep(st, u.Step, now)
	}
	if ap := st.Stage(); ap != s.stage {
		s.stage = ap
		if rp := replyPhaseOf(ap); rp != "" {
			if ap != agentclient.StageWaiting {
				s.mark(string(ap))
			}
			if s.activity == continuation.ActivityContinuing && ap == agentclient.StageWaiting {
				rp = record.PhaseContinuing
			}
			s.deltas.flush()
			s.hb.Set(rp)
		}
	}
	if u.Step < 0 {
		return
	}
	switch u.Kind {
	case agentclient.StepAssistant:
		if u.Delta != "" {
			if s.first.IsZero() {
				s.first = now
			}
			s.deltas.write(false, u.Delta)
		}
	case agentclient.StepReasoning:
		if u.Delta != "" {
			s.deltas.write(true, u.Delta)
		}
	}
}

// toolStep passes on the tool step idx. Not inlined: OnEvent runs for
// every ping, and its frame stays small (see agentclient's handleFrame for
// the figure).
//
//go:noinline
func (s *Stream) toolStep(st *agentclient.StreamState, idx int, now time.Time) {
	snap := st.Snapshot()
	if idx < len(snap.Transcript.Steps) {
		s.onTool(snap.Transcript.Steps[idx], idx, now)
	}
}

func (s *Stream) onTool(step agentclient.Step, idx int, now time.Time) {
	c, tellCall, tellReturn := s.tools.Step(step, idx, now, record.ToolStatusSuccess)
	switch {
	case tellCall:
		s.deltas.flush() // what the agent said before the call comes first
		s.emit(record.ReplyEvent{Type: record.EventTool, Tool: &record.ToolEvent{Name: c.Name, CallID: step.ToolCallID,
			Arguments: step.Arguments, Status: record.ToolStatusCall}}, false)
	case tellReturn:
		s.emit(record.ReplyEvent{Type: record.EventTool, Tool: &record.ToolEvent{Name: c.Name, CallID: step.ToolCallID,
			Status: c.Status, Return: step.ToolReturn}}, false)
	}
}
