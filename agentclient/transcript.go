package agentclient

import (
	"fmt"
	"strings"
)

// StepKind names what one transcript step is.
type StepKind string

// Step kinds, in the order a turn usually produces them.
const (
	StepReasoning       StepKind = "reasoning"
	StepHiddenReasoning StepKind = "hidden_reasoning"
	StepToolCall        StepKind = "tool_call"
	StepToolReturn      StepKind = "tool_return"
	StepAssistant       StepKind = "assistant"
	StepApprovalRequest StepKind = "approval_request"
	StepError           StepKind = "error"
)

// Step is one entry of a turn's transcript.
type Step struct {
	Kind      StepKind
	MessageID string
	RunID     string
	// Text is the reasoning, the assistant text or the error message.
	Text string
	// ToolName, ToolCallID and Arguments describe a tool call or approval
	// request; on a tool return they name the call it answers.
	ToolName   string
	ToolCallID string
	Arguments  string
	// Status and ToolReturn are set on tool returns (success | error).
	Status     string
	ToolReturn string
}

// Update tells the caller what one applied message changed.
type Update struct {
	// Step is the index of the step that changed, or -1 when the message
	// carried no transcript content (ping, stop reason, usage, unknown).
	Step int
	// Kind of the changed step.
	Kind StepKind
	// New is true when the message started a new step.
	New bool
	// Delta is the text appended to the step (reasoning or assistant).
	Delta string
	// Rewrote is true when a complete message replaced text that was not a
	// prefix of it; Delta is then empty and the caller should re-read Text.
	Rewrote bool
}

type stepKey struct {
	id   string
	kind StepKind
	call string // tool_call_id, so parallel tool calls in one message stay apart
}

// Transcript accumulates a turn from its messages, whether they arrive as
// token deltas on a stream or as complete messages from a poll. The zero
// value is ready to use. It is not safe for concurrent use on its own;
// StreamState guards the one it owns.
//
// Rules: chunks are grouped by message id and kind (reasoning and the tool
// call or assistant text of one model step share an id; a tool return has an
// id of its own and pairs with its call by tool_call_id). Streamed chunks
// append; complete messages replace. An empty chunk never erases content.
type Transcript struct {
	Steps      []Step
	StopReason string
	Usage      *Usage
	index      map[stepKey]int
	lastCall   map[stepKey]int // message id and kind (no call) → last tool call step, for deltas without tool_call_id
	calls      map[string]int  // tool_call_id → tool call step
	dupCalls   []string
	size       int // bytes of text held by Steps (see merge)
}

func (t *Transcript) find(k stepKey) (int, bool) {
	i, ok := t.index[k]
	return i, ok
}

func (t *Transcript) add(k stepKey, s Step) int {
	if t.index == nil {
		t.index = make(map[stepKey]int)
	}
	t.Steps = append(t.Steps, s)
	i := len(t.Steps) - 1
	t.index[k] = i
	return i
}

// merge is mergeText keeping the transcript's size.
func (t *Transcript) merge(dst *string, src string, complete bool) (delta string, rewrote bool) {
	before := len(*dst)
	delta, rewrote = mergeText(dst, src, complete)
	t.size += len(*dst) - before
	return delta, rewrote
}

// Size is the number of bytes of text the transcript holds.
func (t *Transcript) Size() int { return t.size }

// mergeText appends (delta) or replaces (complete) and reports what changed.
func mergeText(dst *string, src string, complete bool) (delta string, rewrote bool) {
	if src == "" {
		return "", false
	}
	if !complete {
		*dst += src
		return src, false
	}
	old := *dst
	*dst = src
	if strings.HasPrefix(src, old) {
		return src[len(old):], false
	}
	return "", true
}

// Apply merges one message. complete says the message is whole (a history or
// run-messages poll, or a step-mode stream) rather than a token delta.
func (t *Transcript) Apply(m Message, complete bool) Update {
	switch m := m.(type) {
	case *ReasoningMessage:
		return t.text(m.ID, m.RunID, StepReasoning, m.Reasoning, complete)
	case *HiddenReasoningMessage:
		return t.text(m.ID, m.RunID, StepHiddenReasoning, m.HiddenReasoning, complete)
	case *AssistantMessage:
		return t.text(m.ID, m.RunID, StepAssistant, m.Content.Text, complete)
	case *ToolCallMessage:
		return t.toolCalls(m.ID, m.RunID, StepToolCall, m.Calls(), complete)
	case *ApprovalRequestMessage:
		return t.toolCalls(m.ID, m.RunID, StepApprovalRequest, m.Calls(), complete)
	case *ToolReturnMessage:
		return t.toolReturn(m, complete)
	case *ErrorMessage:
		text := errorText(m)
		t.size += len(text)
		i := t.add(stepKey{id: m.ID + "\x00err" + fmt.Sprint(len(t.Steps)), kind: StepError},
			Step{Kind: StepError, MessageID: m.ID, RunID: m.RunID, Text: text})
		return Update{Step: i, Kind: StepError, New: true}
	case *StopReason:
		if m.StopReason != "" {
			t.StopReason = m.StopReason
		}
	case *Usage:
		u := *m
		t.Usage = &u
	}
	return Update{Step: -1}
}

func errorText(m *ErrorMessage) string {
	s := m.ErrorType
	if m.Message != "" {
		s += ": " + m.Message
	}
	return s
}

func (t *Transcript) text(id, runID string, kind StepKind, text string, complete bool) Update {
	k := stepKey{id: id, kind: kind}
	i, ok := t.find(k)
	if !ok {
		i = t.add(k, Step{Kind: kind, MessageID: id, RunID: runID})
	}
	d, rw := t.merge(&t.Steps[i].Text, text, complete)
	return Update{Step: i, Kind: kind, New: !ok, Delta: d, Rewrote: rw}
}

func (t *Transcript) toolCalls(id, runID string, kind StepKind, calls []ToolCall, complete bool) Update {
	u := Update{Step: -1, Kind: kind}
	if len(calls) == 0 {
		// A terminator chunk with nothing in it: keep what we have.
		if i, ok := t.lastCall[stepKey{id: id, kind: kind}]; ok {
			u.Step = i
		}
		return u
	}
	if t.lastCall == nil {
		t.lastCall = make(map[stepKey]int)
		t.calls = make(map[string]int)
	}
	for _, c := range calls {
		var i int
		var ok bool
		if c.ToolCallID != "" {
			i, ok = t.find(stepKey{id: id, kind: kind, call: c.ToolCallID})
			if !ok {
				// A delta that first came without tool_call_id, now named.
				if j, had := t.lastCall[stepKey{id: id, kind: kind}]; had && t.Steps[j].ToolCallID == "" {
					i, ok = j, true
					t.index[stepKey{id: id, kind: kind, call: c.ToolCallID}] = j
				}
			}
		} else {
			i, ok = t.lastCall[stepKey{id: id, kind: kind}]
		}
		if !ok {
			i = t.add(stepKey{id: id, kind: kind, call: c.ToolCallID}, Step{Kind: kind, MessageID: id, RunID: runID})
			u.New = true
		}
		s := &t.Steps[i]
		if c.ToolCallID != "" && s.ToolCallID == "" {
			s.ToolCallID = c.ToolCallID
			if kind == StepToolCall {
				if prev, seen := t.calls[c.ToolCallID]; seen && prev != i {
					t.dupCalls = append(t.dupCalls, c.ToolCallID)
				}
				t.calls[c.ToolCallID] = i
			}
		}
		if c.Name != "" && (complete || s.ToolName == "") {
			s.ToolName = c.Name
		}
		t.merge(&s.Arguments, c.Arguments, complete)
		t.lastCall[stepKey{id: id, kind: kind}] = i
		u.Step = i
	}
	return u
}

func (t *Transcript) toolReturn(m *ToolReturnMessage, complete bool) Update {
	callID, status, ret := m.ToolCallID, m.Status, m.ToolReturn
	if callID == "" && len(m.ToolReturns) > 0 {
		r := m.ToolReturns[0]
		callID, status, ret = r.ToolCallID, r.Status, r.ToolReturn.Text
	}
	k := stepKey{id: m.ID, kind: StepToolReturn, call: callID}
	i, ok := t.find(k)
	if !ok {
		i = t.add(k, Step{Kind: StepToolReturn, MessageID: m.ID, RunID: m.RunID, ToolCallID: callID})
	}
	s := &t.Steps[i]
	if status != "" {
		s.Status = status
	}
	t.merge(&s.ToolReturn, ret, complete)
	if s.ToolName == "" {
		s.ToolName = m.Name
		if j, found := t.calls[callID]; found && t.Steps[j].ToolName != "" {
			s.ToolName = t.Steps[j].ToolName
		}
	}
	return Update{Step: i, Kind: StepToolReturn, New: !ok}
}

// Answer is the assistant text of the turn: every assistant step, in order,
// separated by a blank line.
func (t Transcript) Answer() string {
	var parts []string
	for _, s := range t.Steps {
		if s.Kind == StepAssistant && s.Text != "" {
			parts = append(parts, s.Text)
		}
	}
	return strings.Join(parts, "\n\n")
}

// UnansweredToolCalls returns the tool calls that have no tool return.
func (t Transcript) UnansweredToolCalls() []Step {
	answered := make(map[string]bool)
	for _, s := range t.Steps {
		if s.Kind == StepToolReturn && s.ToolCallID != "" {
			answered[s.ToolCallID] = true
		}
	}
	var out []Step
	for _, s := range t.Steps {
		if s.Kind == StepToolCall && !answered[s.ToolCallID] {
			out = append(out, s)
		}
	}
	return out
}

// PendingApprovals returns the approval requests of the turn.
func (t Transcript) PendingApprovals() []Step {
	var out []Step
	for _, s := range t.Steps {
		if s.Kind == StepApprovalRequest {
			out = append(out, s)
		}
	}
	return out
}

// DuplicateToolCallIDs lists tool_call_ids seen on two different calls.
func (t Transcript) DuplicateToolCallIDs() []string {
	return append([]string(nil), t.dupCalls...)
}

// Clone returns a deep copy that shares nothing with t.
func (t *Transcript) Clone() Transcript {
	c := Transcript{StopReason: t.StopReason, size: t.size}
	c.Steps = append([]Step(nil), t.Steps...)
	if t.Usage != nil {
		u := *t.Usage
		c.Usage = &u
	}
	if t.index != nil {
		c.index = make(map[stepKey]int, len(t.index))
		for k, v := range t.index {
			c.index[k] = v
		}
	}
	if t.lastCall != nil {
		c.lastCall = make(map[stepKey]int, len(t.lastCall))
		for k, v := range t.lastCall {
			c.lastCall[k] = v
		}
		c.calls = make(map[string]int, len(t.calls))
		for k, v := range t.calls {
			c.calls[k] = v
		}
	}
	c.dupCalls = append([]string(nil), t.dupCalls...)
	return c
}
