package lettasim

import (
	"fmt"
	"time"
)

// StepKind is what one scripted step emits.
type StepKind int

const (
	// Reasoning emits a reasoning_message. It opens a new model step: a new message id that the
	// following ToolCall, Assistant or ApprovalRequest shares (with a different otid).
	Reasoning StepKind = iota + 1
	// ToolCall emits a tool_call_message (ToolName, Arguments).
	ToolCall
	// ToolReturn emits a tool_return_message with an id of its own, paired with the previous
	// ToolCall by tool_call_id. Text is the tool's return value, Status "success" or "error".
	ToolReturn
	// Assistant emits an assistant_message. An empty Text answers "you said: <user text>".
	Assistant
	// ApprovalRequest emits an approval_request_message (ToolName, Arguments, or several Calls)
	// and ends the run with stop reason requires_approval. The thread then waits for an approval
	// message; the steps after this one are what the run of an approving answer does next (see
	// approvals.go).
	ApprovalRequest
)

func (k StepKind) String() string {
	switch k {
	case Reasoning:
		return "reasoning"
	case ToolCall:
		return "tool_call"
	case ToolReturn:
		return "tool_return"
	case Assistant:
		return "assistant"
	case ApprovalRequest:
		return "approval_request"
	}
	return fmt.Sprintf("StepKind(%d)", int(k))
}

// Step is one scripted event of a turn.
type Step struct {
	Kind StepKind
	// Text is the reasoning, the assistant answer or the tool return value.
	Text string
	// ToolName and Arguments describe a ToolCall or ApprovalRequest (Arguments is a JSON text;
	// empty means {"query": "<user text>"}). A ToolReturn's ToolName defaults to the call's.
	ToolName, Arguments string
	// Status of a ToolReturn: "success" (default) or "error".
	Status string
	// Calls, on an ApprovalRequest, asks approval for several tool calls made in one step
	// (parallel tool calls): one approval_request_message names them all (tool_call is the
	// first), and one approval message must answer them all. Empty: the one call ToolName,
	// Arguments.
	Calls []Call
	// Delay before this step, multiplied by Config.TimeScale. Pings flow meanwhile, so a long
	// Delay is a turn that is "thinking".
	Delay time.Duration
}

// Call is one tool call of an ApprovalRequest step (Arguments empty: {"query": "<user text>"}).
type Call struct{ Name, Arguments string }

// Script is what an agent does with one turn.
type Script struct {
	Steps []Step
	// Tokens turns on token mode for every turn of this script (a request's stream_tokens:true
	// turns it on for that turn): the text of reasoning, assistant and tool-call messages is sent
	// as several delta chunks that share one id.
	Tokens bool
	// TokenDelay paces token mode like a model typing: each reasoning and assistant text goes
	// out one word per chunk, TokenDelay (scaled by TimeScale) apart. 0: a text goes out at once
	// in a few chunks.
	TokenDelay time.Duration
	// StopReason ends a turn that ran all its steps; default "end_turn".
	StopReason string
}

// defaultScript is one reasoning step and one assistant message echoing the user.
func defaultScript() Script {
	return Script{Steps: []Step{
		{Kind: Reasoning, Text: "The user wrote to me. I will answer."},
		{Kind: Assistant},
	}}
}

// QuickScript answers at once: one reasoning step and answer (empty answer echoes the user).
func QuickScript(answer string) Script {
	return Script{Steps: []Step{
		{Kind: Reasoning, Text: "The user wrote to me. I will answer."},
		{Kind: Assistant, Text: answer},
	}}
}

// ThinkingScript thinks (pings only) for d before its reasoning step, then answers.
func ThinkingScript(d time.Duration, answer string) Script {
	return Script{Steps: []Step{
		{Kind: Reasoning, Text: "That took some thought.", Delay: d},
		{Kind: Assistant, Text: answer},
	}}
}

// ToolScript calls each tool in turn (reasoning + call, then the return after toolTime), then
// answers.
func ToolScript(toolTime time.Duration, answer string, tools ...string) Script {
	var steps []Step
	steps = append(steps, Step{Kind: Reasoning, Text: "I should look this up."})
	for i, name := range tools {
		steps = append(steps,
			Step{Kind: ToolCall, ToolName: name},
			Step{Kind: ToolReturn, Delay: toolTime},
		)
		if i < len(tools)-1 {
			steps = append(steps, Step{Kind: Reasoning, Text: "Now the next tool."})
		}
	}
	steps = append(steps,
		Step{Kind: Reasoning, Text: "I have what I need."},
		Step{Kind: Assistant, Text: answer},
	)
	return Script{Steps: steps}
}

func (sc *Script) validate() error {
	for i, st := range sc.Steps {
		if st.Kind < Reasoning || st.Kind > ApprovalRequest {
			return fmt.Errorf("lettasim: step %d has invalid kind %d", i, int(st.Kind))
		}
		if st.Status != "" && st.Status != "success" && st.Status != "error" {
			return fmt.Errorf("lettasim: step %d has invalid tool status %q", i, st.Status)
		}
	}
	if sc.StopReason != "" && !validStopReason(sc.StopReason) {
		return fmt.Errorf("lettasim: invalid stop reason %q", sc.StopReason)
	}
	return nil
}

func cloneScript(sc *Script) *Script {
	if sc == nil {
		return nil
	}
	c := *sc
	c.Steps = append([]Step(nil), sc.Steps...)
	for i := range c.Steps {
		c.Steps[i].Calls = append([]Call(nil), c.Steps[i].Calls...)
	}
	return &c
}
