package lettasim

import "time"

// The Go side of the conversation endpoints: make conversations and read what they received.

// ConversationInfo describes a conversation.
type ConversationInfo struct {
	ID            string // "conv-<uuid4>"
	AgentID       string
	Summary       string
	Created       time.Time
	LastMessageAt time.Time // zero before the first send
}

// CreateConversation adds a conversation to an agent (as POST /v1/conversations/?agent_id=
// does) and returns its id, "conv-<uuid4>". It panics on an unknown agent.
func (s *Sim) CreateConversation(agentID, summary string) string {
	return s.newConversation(s.mustAgent(agentID), summary).id
}

// DeleteConversation removes a conversation, as if deleted through Letta's API while its
// turns run: from then on every endpoint of it (send, messages, resume, cancel) answers 404
// and listing the agent's conversations no longer shows it. Its runs go on and stay readable
// through the runs endpoints. It reports whether the conversation existed.
func (s *Sim) DeleteConversation(convID string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	th := s.convs[convID]
	if th == nil {
		return false
	}
	delete(s.convs, convID)
	for i, o := range s.convOrder {
		if o == th {
			s.convOrder = append(s.convOrder[:i:i], s.convOrder[i+1:]...)
			break
		}
	}
	return true
}

// Conversations returns the conversations of an agent ("" for every agent), oldest first.
func (s *Sim) Conversations(agentID string) []ConversationInfo {
	s.mu.RLock()
	all := append([]*thread(nil), s.convOrder...)
	s.mu.RUnlock()
	var out []ConversationInfo
	for _, th := range all {
		if agentID != "" && th.a.id != agentID {
			continue
		}
		th.a.mu.RLock()
		out = append(out, ConversationInfo{ID: th.id, AgentID: th.a.id, Summary: th.summary,
			Created: th.created, LastMessageAt: th.lastMessageAt})
		th.a.mu.RUnlock()
	}
	return out
}

// threadByID resolves "conv-…", or an agent id for the agent's default thread; nil if unknown.
func (s *Sim) threadByID(id string) *thread {
	if th := s.getConv(id); th != nil {
		return th
	}
	if a := s.getAgent(id); a != nil {
		return a.def
	}
	return nil
}

// ConversationUserMessages returns the user messages a thread stored, oldest first, each with
// its otid and run id. convID is a conversation id, or an agent id for the user messages sent
// to the agent's default thread through the conversation endpoints ("default"): the agent
// endpoints' messages are UserMessages'.
func (s *Sim) ConversationUserMessages(convID string) []Received {
	th := s.threadByID(convID)
	if th == nil {
		return nil
	}
	th.a.mu.RLock()
	defer th.a.mu.RUnlock()
	return append([]Received(nil), th.received...)
}

// ConversationHistory returns a conversation's stored messages, oldest first (an agent id: the
// agent's history, as History).
func (s *Sim) ConversationHistory(convID string) []Message {
	th := s.threadByID(convID)
	if th == nil {
		return nil
	}
	if th.isDefault() {
		return s.History(th.a.id)
	}
	th.a.mu.RLock()
	defer th.a.mu.RUnlock()
	out := make([]Message, 0, len(th.rows))
	for _, r := range th.rows {
		out = r.messages(out)
	}
	return out
}

// ConversationRuns returns the runs the conversation endpoints started in a thread, oldest
// first (convID as for ConversationUserMessages).
func (s *Sim) ConversationRuns(convID string) []RunInfo {
	th := s.threadByID(convID)
	if th == nil {
		return nil
	}
	th.a.mu.RLock()
	runs := append([]*run(nil), th.runs...)
	th.a.mu.RUnlock()
	out := make([]RunInfo, len(runs))
	for i, r := range runs {
		out[i] = r.info()
	}
	return out
}

// AllRuns returns every run of every agent, oldest first: with their ConversationID, Started
// and Ended times a test can check that turns of different conversations overlapped.
func (s *Sim) AllRuns() []RunInfo {
	s.mu.RLock()
	runs := append([]*run(nil), s.runOrder...)
	s.mu.RUnlock()
	out := make([]RunInfo, len(runs))
	for i, r := range runs {
		out[i] = r.info()
	}
	return out
}
