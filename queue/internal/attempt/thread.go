package attempt

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/redis/go-redis/v9"
)

// ThreadMode says which Letta message thread a lettaq conversation (agent +
// integration + chat) talks to.
type ThreadMode string

// UnmarshalText reads conversation, default or agent, any case ("" is
// ThreadConversation): for a mode given as text (an environment variable,
// a flag).
func (m *ThreadMode) UnmarshalText(b []byte) error {
	switch v := ThreadMode(strings.ToLower(strings.TrimSpace(string(b)))); v {
	case "":
		*m = ThreadConversation
	case ThreadConversation, ThreadDefault, ThreadAgent:
		*m = v
	default:
		return fmt.Errorf("unknown thread mode %q (want conversation, default or agent)", b)
	}
	return nil
}

const (
	// ThreadConversation (the default): each lettaq conversation has a
	// Letta conversation of its own, created on its first turn and kept in
	// Redis. Its turns are locked and deduplicated by the server; chats of
	// one agent run in parallel, all sharing the agent's memory.
	ThreadConversation ThreadMode = "conversation"
	// ThreadDefault: every chat of an agent talks to the agent's default
	// thread through the conversation endpoints (locked, deduplicated):
	// one run at a time per agent. Pair it with ordering scope agent.
	ThreadDefault ThreadMode = "default"
	// ThreadAgent: the agent endpoints (POST /v1/agents/{id}/messages/
	// stream), deprecated by Letta, without lock or deduplication: lettaq's
	// journal gate is the only guard against a second message.
	ThreadAgent ThreadMode = "agent"
)

// ThreadHash is the hash of a chat's thread (thread.Hash).
func ThreadHash(agentID string, c record.Conversation) string {
	return thread.Hash(agentID, c.Integration, c.ChatID)
}

// ThreadOf names a chat's thread for the store: its hash and the chat,
// whose shard keeps it.
func ThreadOf(agentID string, c record.Conversation) store.ThreadOf {
	return store.ThreadOf{Integration: c.Integration, ChatID: c.ChatID, Hash: ThreadHash(agentID, c)}
}

// ThreadLockSlack is added to the thread phase (the longest a holder may
// resolve a thread) for the lock's expiry: a holder never loses the lock
// while it may still create.
const ThreadLockSlack = 5 * time.Second

// Threads resolves the Letta conversation of a turn.
type Threads struct {
	Mode   ThreadMode
	RDB    redis.UniversalClient
	Keys   store.Keys
	Client *agentclient.Client
	// lock: serialise creation with a Redis lock (ordering off: nothing
	// else keeps two turns of one chat apart), held at most lockTTL.
	Lock    bool
	LockTTL time.Duration
}

// resolve returns the Letta conversation id for the turn of m ("" for the
// agent endpoints). A conversation named in the payload wins.
func (th *Threads) resolve(ctx context.Context, m inbound.Message) (string, error) {
	return th.resolveKnown(ctx, m, "", false, nil)
}

// local is resolveKnown when it needs neither Redis nor Letta (ok): an
// explicit thread, a mode of one thread, a thread known already.
func (th *Threads) local(m inbound.Message, known string) (id string, ok bool) {
	if m.LettaConversationID != "" {
		return m.LettaConversationID, true
	}
	switch th.Mode {
	case ThreadAgent:
		return "", true
	case ThreadDefault:
		return agentclient.DefaultConversation, true
	}
	return known, known != ""
}

// resolveKnown is resolve when the thread key was read already: known is
// the conversation id it held ("" when none), read whether it was read.
// Without the creation lock (ordering on) an attempt reads the key after
// taking its chat's place in the line (turn.startRead), and no other turn
// of the chat writes it while the attempt holds that place: read and
// empty, the key is not read again; and keep, when not nil, takes the
// write of the id made (the attempt sends it with its next round trip,
// which is before its release of the line) instead of a round trip of its
// own. A keep that fails costs the next turn a search (findOrCreate finds
// the conversation by its summary).
func (th *Threads) resolveKnown(ctx context.Context, m inbound.Message, known string, read bool, keep func(store.Op)) (string, error) {
	if id, ok := th.local(m, known); ok {
		return id, nil
	}
	st, hash := th.store(), ThreadOf(m.AgentID, m.Conversation)
	if !read || th.Lock {
		if id, err := st.Known(ctx, hash); err == nil && id != "" {
			return id, nil
		} else if err != nil {
			return "", fmt.Errorf("read the thread of the conversation: %w", err)
		}
	}
	if th.Lock {
		unlock, err := st.Lock(ctx, hash, th.LockTTL)
		if err != nil {
			return "", fmt.Errorf("lock the thread of the conversation: %w", err)
		}
		defer unlock()
		if id, err := st.Known(ctx, hash); err == nil && id != "" {
			return id, nil
		}
	}
	id, err := th.findOrCreate(ctx, m)
	if err != nil {
		return "", err
	}
	if keep != nil && !th.Lock {
		keep(st.KeepOp(hash, id))
		return id, nil
	}
	if err := st.Keep(ctx, hash, id); err != nil {
		// The conversation exists and carries its tag: the next attempt
		// finds it again with summary_search.
		return "", fmt.Errorf("store the thread of the conversation: %w", err)
	}
	return id, nil
}

// findOrCreate returns the conversation tagged with the chat's summary (the
// oldest, should there be several), creating it when there is none.
func (th *Threads) findOrCreate(ctx context.Context, m inbound.Message) (string, error) {
	tag := thread.Summary(m.AgentID, m.Conversation.Integration, m.Conversation.ChatID)
	found, err := th.Client.ListConversations(ctx, agentclient.ListConversationsOptions{AgentID: m.AgentID,
		SummarySearch: tag, Limit: 50, Order: "asc"})
	if err != nil {
		return "", fmt.Errorf("look for the chat's Letta conversation: %w", err)
	}
	var mine []*agentclient.Conversation
	for _, c := range found {
		if c.Summary == tag && agentclient.ValidConversationID(c.ID) {
			mine = append(mine, c)
		}
	}
	if len(mine) > 0 {
		sort.SliceStable(mine, func(i, j int) bool { return mine[i].CreatedAt.Before(mine[j].CreatedAt) })
		return mine[0].ID, nil
	}
	c, err := th.Client.CreateConversation(ctx, m.AgentID, agentclient.CreateConversationRequest{Summary: tag})
	if err != nil {
		return "", fmt.Errorf("create the chat's Letta conversation: %w", err)
	}
	if !agentclient.ValidConversationID(c.ID) || c.ID == agentclient.DefaultConversation {
		return "", fmt.Errorf("create the chat's Letta conversation: the server answered id %q, not conv-<uuid4>", c.ID)
	}
	return c.ID, nil
}

// store is the Redis side of the threads.
func (th *Threads) store() store.Threads {
	return store.Threads{RDB: th.RDB, Keys: th.Keys}
}
