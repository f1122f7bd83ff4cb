package slack

import (
	"strings"

	"github.com/lettaq/lettaq/queue"
)

// Integration is the conversation integration of Slack's chats.
const Integration = "slack"

// Conversation is the lettaq conversation of a Slack thread (threadTS the
// thread's root ts), or of a whole channel when threadTS is "" (a DM written
// outside a thread).
func Conversation(channel, threadTS string) queue.Conversation {
	if threadTS == "" {
		return queue.Conversation{Integration: Integration, ChatID: channel}
	}
	return queue.Conversation{Integration: Integration, ChatID: channel + "/" + threadTS}
}

// Where returns a conversation's channel and thread ts ("" for none).
func Where(c queue.Conversation) (channel, threadTS string) {
	channel, threadTS, _ = strings.Cut(c.ChatID, "/")
	return channel, threadTS
}
