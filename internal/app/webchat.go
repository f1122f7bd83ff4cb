package app

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/webchat"
)

// webChatOptions are what the worker (dev mode) and the relay give the web chat page.
type webChatOptions struct {
	Redis   redis.UniversalClient
	Prefix  string
	Client  *queue.Client
	Replies *queue.Replies
	Agents  []webchat.Agent
	// AnyAgent lets the user type an agent id.
	AnyAgent bool
	// JournalURL: see webchat.Config ("" shows no link).
	JournalURL string
	// Heartbeat and Block: see webchat.Config (0: its defaults).
	Heartbeat, Block time.Duration
	Logger           *slog.Logger
}

// newWebChat returns the web chat page's handler (relay/webchat) on the queue's public API:
// Client.Enqueue, Replies.Read, Client.AnswerApproval, Client.Cancel.
func newWebChat(o webChatOptions) http.Handler {
	return webchat.New(webchat.Config{
		Enqueue: o.Client, Stream: o.Replies, Approvals: o.Client, Cancel: o.Client,
		Said:   &webchat.RedisSaid{Redis: o.Redis, Prefix: o.Prefix},
		Agents: o.Agents, AnyAgent: o.AnyAgent, JournalURL: o.JournalURL,
		Heartbeat: o.Heartbeat, Block: o.Block, Logger: o.Logger,
		Tail: func(ctx context.Context, c record.Conversation) (string, error) {
			last, err := o.Redis.XRevRangeN(ctx, o.Replies.Key(c), "+", "-", 1).Result()
			if err != nil || len(last) == 0 {
				return "", err
			}
			return last[0].ID, nil
		},
	})
}

// devAgents are dev mode's demo agents, as the chat page offers them.
func devAgents(d *DevEnv) []webchat.Agent {
	var out []webchat.Agent
	for _, name := range DemoAgentNames {
		out = append(out, webchat.Agent{Name: name, ID: d.Agents[name]})
	}
	return out
}
