package queue

import "github.com/lettaq/lettaq/queue/internal/attempt"

// ThreadMode says which Letta message thread a lettaq conversation (agent +
// integration + chat) talks to.
type ThreadMode = attempt.ThreadMode

// The thread modes (see queue/internal/attempt for what each does).
const (
	// ThreadConversation (the default): each chat has a Letta conversation
	// of its own.
	ThreadConversation = attempt.ThreadConversation
	// ThreadDefault: every chat of an agent talks to the agent's default
	// thread. Pair it with ordering scope agent.
	ThreadDefault = attempt.ThreadDefault
	// ThreadAgent: the agent endpoints, deprecated by Letta, without lock or
	// deduplication.
	ThreadAgent = attempt.ThreadAgent
)
