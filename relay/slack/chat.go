package slack

import (
	"strings"

	"github.com/lettaq/lettaq/queue/record"
)

// Integration is the conversation integration of Slack's chats.
const Integration = "slack"

// Conversation is the lettaq conversation of a Slack thread (threadTS the
// thread's root ts), or of a whole channel when threadTS is "" (a DM written
// outside a thread).
func Conversation(channel, threadTS string) record.Conversation {
	if threadTS == "" {
		return record.Conversation{Integration: Integration, ChatID: channel}
	}
	return record.Conversation{Integration: Integration, ChatID: channel + "/" + threadTS}
}

// Where returns a conversation's channel and thread ts ("" for none).
func Where(c record.Conversation) (channel, threadTS string) {
	channel, threadTS, _ = strings.Cut(c.ChatID, "/")
	return channel, threadTS
}
