package ordering

import "strings"

// Scope says which turns share one line (and so run one at a time).
type Scope int

const (
	// ScopeConversation (default): one line per agent, integration and
	// chat. Different chats on one agent run in parallel.
	ScopeConversation Scope = iota
	// ScopeAgent: one line per agent. An agent shared by many chats runs
	// one turn at a time (Letta agents have one message history: two turns
	// at once interleave in it, whichever chat they came from).
	ScopeAgent
)

// KeyFor returns the conversation key of a turn under scope.
func KeyFor(scope Scope, agentID, integration, chatID string) string {
	if scope == ScopeAgent {
		return AgentKey(agentID)
	}
	return ConversationKey(agentID, integration, chatID)
}

// ConversationKey is the key of one chat with one agent:
// "c:<agent>:<integration>:<chat>", each part escaped (see escape) so that
// parts cannot run into each other and no brace reaches the key.
func ConversationKey(agentID, integration, chatID string) string {
	return "c:" + escape(agentID) + ":" + escape(integration) + ":" + escape(chatID)
}

// AgentKey is the key of everything one agent does: "a:<agent>".
func AgentKey(agentID string) string { return "a:" + escape(agentID) }

// escape percent-encodes '%', ':', '{' and '}'.
func escape(s string) string {
	if !strings.ContainsAny(s, "%:{}") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			b.WriteString("%25")
		case ':':
			b.WriteString("%3A")
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		default:
			b.WriteByte(c)
		}
	}
	return b.String()
}

func validKey(key string) bool {
	return key != "" && !strings.ContainsAny(key, "{}")
}

// keys of one conversation key. All carry the hash tag {key}.
func (s *Sequencer) lineKey(key string) string { return s.prefix + "line:{" + key + "}" }
func (s *Sequencer) lockKey(key string) string { return s.prefix + "lock:{" + key + "}" }
func (s *Sequencer) mergedPrefix(key string) string {
	return s.prefix + "merged:{" + key + "}:"
}
func (s *Sequencer) mergedKey(key, task string) string {
	return s.prefix + "merged:{" + key + "}:" + task // mergedPrefix's, in one string
}
func (s *Sequencer) doneKey(key, task string) string {
	return s.prefix + "done:{" + key + "}:" + task
}
func (s *Sequencer) groupKey(key, head string) string {
	return s.prefix + "group:{" + key + "}:" + head
}
