package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
)

// Where dev mode's chats are (LETTAQ_RELAY, --relay): the web chat page is
// always served; another value also runs the relay in this process with that
// platform's adapter, against the platform's fake, so the whole path (the
// platform's request, the queue, the worker, the relay's calls) is visible
// without a token.
const (
	DevRelayWeb   = "web"
	DevRelaySlack = "slack"
)

// DevRelays are LETTAQ_RELAY's values.
var DevRelays = []string{DevRelayWeb, DevRelaySlack}

const devRelayHelp = "dev mode: where you talk to the demo agents: web (the web chat page at /chat/), " +
	"slack (also the relay with its Slack adapter in this process, against a fake Slack on a loopback port, the app answering as the demo agent; " +
	"the greeting prints the curl commands that write to the app as a Slack user and show what it posted). " +
	"Outside dev mode the relay is its own command: relay with a real app's LETTAQ_SLACK_BOT_TOKEN and LETTAQ_SLACK_SIGNING_SECRET is the production Slack app (docs/slack.md)"

// devRelayNeedsDev is the error of a platform relay asked for outside dev mode.
func devRelayNeedsDev(relay string) error {
	return fmt.Errorf("LETTAQ_RELAY=%s (--relay) runs the relay against a fake %s and needs dev mode (--dev); "+
		"in production run the relay command with the platform's credentials (docs/relay.md)", relay, relay)
}

// devRelay is a relay dev mode runs in the worker's process against a fake
// platform.
type devRelay struct {
	// greet prints how to talk to the fake platform from a terminal.
	greet func(io.Writer)
	// done is closed once the relay and its fake have stopped (after ctx).
	done chan struct{}
}

// startDevRelay starts the relay cfg.Relay names (nil for web: the worker's
// own listener serves the web chat page) until ctx ends.
func startDevRelay(ctx context.Context, cfg WorkerSettings, dev *DevEnv, rdb redis.UniversalClient, client *queue.Client, logger *slog.Logger) (*devRelay, error) {
	switch cfg.Relay {
	case DevRelaySlack:
		return startDevSlack(ctx, cfg, dev, rdb, client, logger)
	}
	return nil, nil
}
