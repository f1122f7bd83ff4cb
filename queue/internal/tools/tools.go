// Package tools follows one attempt's tool calls as its stream shows them: when each was
// called and returned, with which status, and whether the chat has been told of its call and
// of its return (once each).
package tools

import (
	"strconv"
	"time"

	"github.com/lettaq/lettaq/agentclient"
)

// Call is one tool call of the attempt.
type Call struct {
	Name, CallID string
	Called       time.Time
	Returned     time.Time
	// Status is the return's status ("" until it returned).
	Status string

	callTold, returnTold bool
}

// Calls are the attempt's tool calls, in the order they were first seen. The zero value
// holds none (and no map: an attempt that only thinks pays nothing).
type Calls struct {
	list  []*Call
	byKey map[string]*Call
}

// Step notes step idx of the transcript, seen at now (a step without a call id is keyed by
// its index). It returns the call, and what the chat is to be told now: its call, once it
// has a name; its return, once. A return without a status gets success.
func (cs *Calls) Step(s agentclient.Step, idx int, now time.Time, success string) (c *Call, tellCall, tellReturn bool) {
	key := s.ToolCallID
	if key == "" {
		key = "step:" + strconv.Itoa(idx)
	}
	c = cs.byKey[key]
	if c == nil {
		if cs.byKey == nil {
			cs.byKey = make(map[string]*Call)
		}
		c = &Call{CallID: s.ToolCallID}
		cs.byKey[key] = c
		cs.list = append(cs.list, c)
	}
	if c.Name == "" {
		c.Name = s.ToolName
	}
	switch s.Kind {
	case agentclient.StepToolCall:
		if c.Called.IsZero() {
			c.Called = now
		}
		if !c.callTold && c.Name != "" {
			c.callTold = true
			return c, true, false
		}
	case agentclient.StepToolReturn:
		if c.returnTold {
			return c, false, false
		}
		c.returnTold = true
		c.Returned = now
		c.Status = s.Status
		if c.Status == "" {
			c.Status = success
		}
		return c, false, true
	}
	return c, false, false
}

// All returns the calls in the order they were first seen.
func (cs *Calls) All() []*Call { return cs.list }
