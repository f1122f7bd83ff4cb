package agentclient

import (
	"sync"
	"sync/atomic"
	"time"
)

// Stage is where a turn's stream is, as far as it has shown: connecting,
// waiting, thinking, running a tool, answering, stopped.
type Stage string

// Stages of a streamed turn.
const (
	StageIdle       Stage = ""
	StageConnecting Stage = "connecting"   // request sent, no byte yet
	StageWaiting    Stage = "waiting"      // connected, only pings so far
	StageThinking   Stage = "thinking"     // reasoning is arriving
	StageToolCall   Stage = "tool_running" // a tool call is out, no return yet
	StageAnswering  Stage = "answering"    // assistant text is arriving
	StageStopped    Stage = "stopped"      // stop_reason received
)

// StreamState is everything a stream (or a continuation) has learned about a
// turn. The caller owns it and passes it to every read of the turn: the
// reader updates it on every event before the event is handed on, so a read
// that is cancelled, or whose clock fires, loses nothing. Methods are safe
// for concurrent use; read it from another goroutine while a stream runs.
type StreamState struct {
	mu           sync.Mutex
	runID        string
	lastSeq      int64
	hasSeq       bool
	seqCheck     bool  // a resume: chunks must number on from seqNext (seqgap.go)
	seqNext      int64 // the seq_id the next chunk must have
	ids          []string
	seen         map[string]struct{}
	tr           Transcript
	errMsg       *ErrorMessage
	stage        Stage
	started      time.Time
	firstByte    time.Time
	firstContent time.Time
	lastContent  time.Time
	events       int
	pings        int
	done         bool // [DONE] seen
	maxText      int  // transcript bound (0: DefaultMaxTranscriptBytes)
	overLimit    *ProtocolError

	lastByte atomic.Int64 // unix nanos; written per read, without the lock

	// pending is the stepwise stream waiting for bytes
	// (StreamOptions.Stepwise); only the reading goroutine touches it.
	pending *openStream
}

// NewStreamState returns an empty state. A zero StreamState is also usable.
func NewStreamState() *StreamState { return &StreamState{} }

// Snapshot is a copy of a StreamState at one moment.
type Snapshot struct {
	RunID string
	// LastSeq is the last seq_id seen (background streams); HasSeq is false
	// while none was seen (foreground streams send null).
	LastSeq int64
	HasSeq  bool
	// MessageIDs in the order first seen.
	MessageIDs   []string
	Transcript   Transcript
	Answer       string
	StopReason   string
	Usage        *Usage
	Error        *ErrorMessage
	Stage        Stage
	Started      time.Time
	FirstByte    time.Time
	FirstContent time.Time
	LastContent  time.Time
	LastByte     time.Time
	Events       int
	Pings        int
	Done         bool
}

// Snapshot copies the state.
func (s *StreamState) Snapshot() Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	tr := s.tr.Clone()
	snap := Snapshot{
		RunID: s.runID, LastSeq: s.lastSeq, HasSeq: s.hasSeq,
		MessageIDs: append([]string(nil), s.ids...),
		Transcript: tr, Answer: tr.Answer(), StopReason: tr.StopReason, Usage: tr.Usage,
		Stage: s.stage, Started: s.started, FirstByte: s.firstByte,
		FirstContent: s.firstContent, LastContent: s.lastContent,
		Events: s.events, Pings: s.pings, Done: s.done,
	}
	if s.errMsg != nil {
		e := *s.errMsg
		snap.Error = &e
	}
	if n := s.lastByte.Load(); n != 0 {
		snap.LastByte = time.Unix(0, n)
	}
	return snap
}

// RunID returns the run id learned so far ("" if none).
func (s *StreamState) RunID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.runID
}

// SetRunID records a run id learned elsewhere (an async send, a history lookup).
func (s *StreamState) SetRunID(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id != "" {
		s.runID = id
	}
}

// LastSeq returns the last seq_id seen and whether any was seen.
func (s *StreamState) LastSeq() (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastSeq, s.hasSeq
}

// StopReason returns the stop reason, "" while the run has not stopped.
func (s *StreamState) StopReason() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.StopReason
}

// Answer returns the assistant text so far.
func (s *StreamState) Answer() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tr.Answer()
}

// Stage returns the stream's current stage.
func (s *StreamState) Stage() Stage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stage
}

// PollCursor is the message id after which a poll of the run's messages
// should start so that nothing is missed: the id before the last one seen,
// because the last one may have been only partly streamed (token mode) or
// not stored yet. "" means from the start of the run.
func (s *StreamState) PollCursor() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) < 2 {
		return ""
	}
	return s.ids[len(s.ids)-2]
}

// LastMessageID returns the id of the last message seen.
func (s *StreamState) LastMessageID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.ids) == 0 {
		return ""
	}
	return s.ids[len(s.ids)-1]
}

// HasMessage reports whether a message id was seen.
func (s *StreamState) HasMessage(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.seen[id]
	return ok
}

// SetStage sets the stage (a continuation uses it to say where it is).
func (s *StreamState) SetStage(p Stage) {
	s.mu.Lock()
	s.stage = p
	s.mu.Unlock()
}

func (s *StreamState) begin(now time.Time) {
	s.mu.Lock()
	if s.started.IsZero() {
		s.started = now
	}
	if s.stage == StageIdle {
		s.stage = StageConnecting
	}
	s.mu.Unlock()
}

// touch records that bytes arrived. Called per read; lock-free.
func (s *StreamState) touch(now int64) {
	s.lastByte.Store(now)
}

func (s *StreamState) markFirstByte(now time.Time) {
	s.mu.Lock()
	if s.firstByte.IsZero() {
		s.firstByte = now
	}
	if s.stage == StageConnecting {
		s.stage = StageWaiting
	}
	s.mu.Unlock()
}

func (s *StreamState) markDone() {
	s.mu.Lock()
	s.done = true
	s.mu.Unlock()
}

// Apply merges one message into the state and returns what changed in the
// transcript. complete says whether it is a whole message (poll, step mode)
// or a token delta. Streams call it for you; a continuation calls it with
// polled messages so that stream and polls build one transcript.
func (s *StreamState) Apply(m Message, complete bool, now time.Time) Update {
	s.mu.Lock()
	defer s.mu.Unlock()
	c := m.Base()
	s.events++
	if _, isErr := m.(*ErrorMessage); c.RunID != "" && s.runID == "" && !isErr {
		// An error event's run_id may name another run (the one holding
		// the thread): only a ping or a message names the turn's own.
		s.runID = c.RunID
	}
	if c.SeqID != nil && (!s.hasSeq || *c.SeqID > s.lastSeq) {
		s.lastSeq, s.hasSeq = *c.SeqID, true
	}
	if s.overLimit != nil {
		return Update{Step: -1}
	}
	switch m := m.(type) {
	case *Ping:
		s.pings++
		return Update{Step: -1}
	case *Usage:
		if s.runID == "" && len(m.RunIDs) > 0 {
			s.runID = m.RunIDs[0]
		}
	case *ErrorMessage:
		e := *m
		s.errMsg = &e
	case *UserMessage, *SystemMessage, *UnknownMessage, *ApprovalResponseMessage:
		return Update{Step: -1}
	}
	if c.ID != "" && c.MessageType != TypeError {
		if s.seen == nil {
			s.seen = make(map[string]struct{})
		}
		if _, ok := s.seen[c.ID]; !ok {
			s.seen[c.ID] = struct{}{}
			s.ids = append(s.ids, c.ID)
		}
	}
	u := s.tr.Apply(m, complete)
	if max := s.maxTranscript(); s.tr.size > max {
		s.overLimit = overLimit(ErrTranscriptTooLarge, max, "MaxTranscriptBytes")
		return Update{Step: -1}
	}
	if u.Step >= 0 {
		if s.firstContent.IsZero() {
			s.firstContent = now
		}
		s.lastContent = now
		switch u.Kind {
		case StepReasoning, StepHiddenReasoning:
			s.stage = StageThinking
		case StepToolCall:
			s.stage = StageToolCall
		case StepToolReturn:
			s.stage = StageThinking
		case StepAssistant:
			s.stage = StageAnswering
		}
	}
	if s.tr.StopReason != "" {
		s.stage = StageStopped
	}
	return u
}

func (s *StreamState) lastContentAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lastContent.IsZero() {
		return s.firstByte
	}
	return s.lastContent
}

func (s *StreamState) maxTranscript() int {
	if s.maxText > 0 {
		return s.maxText
	}
	return DefaultMaxTranscriptBytes
}

// SetTranscriptLimit bounds the text the state accumulates (reasoning,
// tool calls and returns, answers); n <= 0 keeps the current bound
// (DefaultMaxTranscriptBytes unless set). Streams set their client's
// MaxTranscriptBytes; set it for a state fed by polls only.
func (s *StreamState) SetTranscriptLimit(n int) { s.limit(n) }

func (s *StreamState) limit(n int) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	s.maxText = n
	s.mu.Unlock()
}

// LimitErr returns the *ProtocolError of a transcript that passed its
// bound, nil while it has not. From then on Apply ignores every message.
func (s *StreamState) LimitErr() *ProtocolError {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.overLimit
}
