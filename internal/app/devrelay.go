package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"
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

// devRelay is a relay dev mode runs in this process.
type devRelay struct {
	// greeting adds to dev mode's greeting how to talk to the platform's fake.
	greeting func(w io.Writer)
	// stop stops the relay and its fake, and waits for them.
	stop func()
}

// startDevRelay starts the relay cfg.Relay names (nil for web: the worker's
// own listener serves the web chat page).
func startDevRelay(ctx context.Context, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (*devRelay, error) {
	switch cfg.Relay {
	case DevRelaySlack:
		return startDevSlack(ctx, cfg, dev, logger)
	}
	return nil, nil
}

// devRelaySweep is how often dev mode's relay looks for news: its in-memory
// Redis sends no keyspace notifications.
const devRelaySweep = 100 * time.Millisecond

// runDevRelay runs the relay command's own code (runRelay) in this process,
// configured by env as the relay command is, against dev mode's Redis and
// with the worker's budget, its listener on a free loopback port. It returns
// once the relay listens (its address), or its error.
func runDevRelay(ctx context.Context, env map[string]string, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (addr string, stop func(), err error) {
	base := map[string]string{
		"REDIS_URL":             "redis://" + dev.RedisAddr + "/0",
		"LETTAQ_KEY_PREFIX":     cfg.KeyPrefix,
		"LETTAQ_RELAY_ID":       "dev-relay",
		"LETTAQ_RELAY_SHARDS":   "1", // one replica: one shard is enough, and one line in the log
		"LETTAQ_RELAY_AGENT_ID": dev.Agents[DemoAgent],
		"LETTAQ_HTTP_ADDR":      "127.0.0.1:0",
	}
	for k, v := range env {
		base[k] = v
	}
	rs, err := ParseRelaySettings(nil, func(k string) string { return base[k] }, io.Discard)
	if err != nil {
		return "", nil, fmt.Errorf("dev mode's relay: %w", err)
	}
	rs.Budget = cfg.Budget // the answers to approvals are turns of this worker
	rs.sweepEvery = devRelaySweep
	listening := make(chan string, 1)
	rs.listening = func(a string) { listening <- a }
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- runRelay(ctx, rs, logger.With("component", "relay")) }()
	select {
	case addr = <-listening:
	case err := <-done:
		cancel()
		if err == nil {
			err = context.Cause(ctx) // stopped before it listened
		}
		return "", nil, fmt.Errorf("dev mode's relay did not start: %w", err)
	}
	return addr, func() { cancel(); <-done }, nil
}
