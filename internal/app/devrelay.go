package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"
)

// devRelayHelp is LETTAQ_RELAY's line in the worker's --help.
const devRelayHelp = "dev mode: where you talk to the demo agent besides the web chat page at /chat/: " +
	"web (the page only), telegram or slack (the relay and that platform's adapter in this process, against a fake " +
	"Bot API or a fake Slack on loopback; the greeting prints the curl commands that play the user and show what the bot posted). " +
	"Only with --dev: the production bot is the relay command with the platform's credentials " +
	"(LETTAQ_TELEGRAM_TOKEN: docs/telegram.md; LETTAQ_SLACK_BOT_TOKEN and LETTAQ_SLACK_SIGNING_SECRET: docs/slack.md)"

// devRelayNames are LETTAQ_RELAY's values, in the order its error names them.
var devRelayNames = []string{"web", "telegram", "slack"}

// parseDevRelay reads LETTAQ_RELAY (--relay). Each value is one case here and
// one in startDevRelay.
func parseDevRelay(raw string) (string, error) {
	switch raw = strings.ToLower(raw); raw {
	case "web": // the web chat page only; no relay runs
	case "telegram": // devtelegram.go
	case "slack": // devrelayslack.go
	default:
		return "", fmt.Errorf("unknown relay; want one of %s", strings.Join(devRelayNames, ", "))
	}
	return raw, nil
}

// devRelay is a relay dev mode runs in the worker's process against a fake
// platform.
type devRelay struct {
	// greet prints how to talk to the fake platform from a terminal.
	greet func(io.Writer)
	// done is closed once the relay and its fake have stopped (after ctx).
	done chan struct{}
}

// startDevRelay starts the relay cfg.Relay names (nil for web) until ctx
// ends, on dev mode's Redis (runRelayInProcess).
func startDevRelay(ctx context.Context, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (*devRelay, error) {
	switch cfg.Relay {
	case "telegram":
		return startDevTelegram(ctx, cfg, dev, logger)
	case "slack":
		return startDevSlack(ctx, cfg, dev, logger)
	}
	return nil, nil
}

// devRelaySweep is how often dev mode's relay looks for news: its in-memory
// Redis sends no keyspace notifications.
const devRelaySweep = 100 * time.Millisecond

// runRelayInProcess runs the relay command's own code (runRelay) in this
// process until ctx ends, configured by env as the relay command is, against
// dev mode's Redis and with the worker's budget, its listener on a free
// loopback port. It returns once the relay listens (its address, and a
// channel closed once it has stopped), or its error.
func runRelayInProcess(ctx context.Context, env map[string]string, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (addr string, stopped <-chan struct{}, err error) {
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
	rs.ReplyStreamTTL = cfg.repliesStreamTTL() // the dev worker's own
	listening := make(chan string, 1)
	rs.listening = func(a string) { listening <- a }
	done := make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		defer close(done)
		if err := runRelay(ctx, rs, logger.With("component", "relay")); err != nil && ctx.Err() == nil {
			logger.Error("dev mode's relay stopped", "err", err)
			failed <- err
		}
	}()
	select {
	case addr = <-listening:
		return addr, done, nil
	case err := <-failed:
		return "", nil, fmt.Errorf("dev mode's relay did not start: %w", err)
	case <-done:
		select {
		case err = <-failed:
		default:
			err = context.Cause(ctx) // stopped before it listened
		}
		return "", nil, fmt.Errorf("dev mode's relay did not start: %w", err)
	}
}
