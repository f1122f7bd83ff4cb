package queue

import (
	"slices"
	"strings"
	"time"

	"github.com/lettaq/lettaq/ordering"
)

// defaultMaxCoalesce bounds how many waiting messages one turn takes in
// (Ordering.MaxCoalesce).
const defaultMaxCoalesce = 20

// Ordering configures one turn at a time per conversation, in enqueue
// order (package ordering). The zero value is the default: on, one line
// per conversation (agent + integration + chat), keys under
// ordering.DefaultPrefix, no coalescing. Client and workers must agree on
// Off, Scope and Config.Prefix (a client under ordering schedules a turn
// queued behind another, and only workers under ordering wake it).
type Ordering struct {
	// Off: turns run as soon as a worker takes them, concurrently within a
	// conversation.
	Off bool
	// Scope: ordering.ScopeConversation (default) or ordering.ScopeAgent
	// (one line per agent, for an agent shared by many chats).
	Scope ordering.Scope
	// Sequencer, when nil, is made on the connection's Redis with Config.
	Sequencer *ordering.Sequencer
	Config    ordering.Config
	// Coalesce (workers only) names the integrations whose waiting
	// messages are merged: when a turn gets its conversation, the messages
	// queued right behind it (they arrived while the previous turn ran) are
	// sent with it as one user message. Requires ScopeConversation.
	Coalesce []string
	// MaxCoalesce bounds the messages merged into one turn (default 20).
	MaxCoalesce int
	// WaitCheck is the safety net of a turn that waits (for the turn ahead
	// of it, or for its chat's approval request to be answered, also with
	// Off): the event that frees it wakes it within a second; should that
	// wake-up be lost (a worker died holding the line), it looks again
	// WaitCheck later. Client.Enqueue schedules a turn with turns ahead of
	// it WaitCheck ahead, and a worker schedules a turn that parked (see
	// queue/internal/line) WaitCheck ahead. Default 10 minutes (LETTAQ_WAIT_CHECK).
	WaitCheck time.Duration
}

// defaultWaitCheck is Ordering.WaitCheck's default.
const defaultWaitCheck = 10 * time.Minute

// recheck is WaitCheck or its default: the process-in delay of a waiting
// turn, whatever its position (it is woken by the turn ahead of it; the
// delay is only the safety net).
func (o Ordering) recheck() time.Duration {
	if o.WaitCheck <= 0 {
		return defaultWaitCheck
	}
	return o.WaitCheck
}

// OrderingPrefix is the ordering key prefix that goes with a reply and
// journal key prefix (LETTAQ_KEY_PREFIX): its hash-tag braces removed (the
// ordering package tags each conversation's keys itself), then "ord:".
// "lettaq:" and "{lettaq}:" both give ordering.DefaultPrefix. A Go client
// must use the same prefix as the workers, or its messages join another line.
func OrderingPrefix(keyPrefix string) string {
	if keyPrefix == "" {
		keyPrefix = "lettaq:"
	}
	return strings.NewReplacer("{", "", "}", "").Replace(keyPrefix) + "ord:"
}

// Key returns the ordering key of m under o's scope.
func (o Ordering) Key(m Message) string {
	return ordering.KeyFor(o.Scope, m.AgentID, m.Conversation.Integration, m.Conversation.ChatID)
}

// coalesces reports whether messages of integration are merged.
func (o Ordering) coalesces(integration string) bool {
	return slices.Contains(o.Coalesce, integration)
}
