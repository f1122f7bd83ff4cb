// Package thread names the Letta conversation lettaq keeps for a chat
// (thread mode conversation): the summary it creates it with, and the
// Redis key that stores its id. The worker (package queue) and the
// end-to-end tests, which look at both, share them.
package thread

import (
	"crypto/sha256"
	"encoding/hex"
)

// DefaultPrefix is the key prefix when none is given (queue's default).
const DefaultPrefix = "lettaq:"

// Hash is a stable hash of the agent, integration and chat id.
func Hash(agentID, integration, chatID string) string {
	h := sha256.New()
	for _, p := range []string{agentID, integration, chatID} {
		h.Write([]byte(p))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil))[:32]
}

// Summary is the summary lettaq gives the Letta conversation it creates
// for a chat: "lettaq:" and Hash. Found again with summary_search, it lets
// a worker that crashed between creating the conversation and storing its
// id use that conversation instead of making a second one.
func Summary(agentID, integration, chatID string) string {
	return "lettaq:" + Hash(agentID, integration, chatID)
}

// Key is the Redis key (under prefix; "": DefaultPrefix) that keeps the
// Letta conversation id of a chat. It never expires. It is the key queue's
// store writes (store.Keys.Thread; queue's TestThreadKeyIsTheStores holds
// them equal).
func Key(prefix, agentID, integration, chatID string) string {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	return prefix + "thread:" + Hash(agentID, integration, chatID)
}
