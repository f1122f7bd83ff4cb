package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/relay"
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
// ends, on the dev worker's Redis and queue client.
func startDevRelay(ctx context.Context, cfg WorkerSettings, dev *DevEnv, rdb redis.UniversalClient, client *queue.Client, logger *slog.Logger) (*devRelay, error) {
	switch cfg.Relay {
	case "telegram":
		return startDevTelegram(ctx, cfg, dev, rdb, client, logger)
	case "slack":
		return startDevSlack(ctx, cfg, dev, rdb, client, logger)
	}
	return nil, nil
}

// devSweepEvery is how often a dev relay looks for chats with news: the
// in-memory Redis sends no keyspace notifications, so Relay.Notify would
// hear nothing there.
const devSweepEvery = 200 * time.Millisecond

// runDevRelay runs r until ctx ends, as cmd/relay runs it on one replica,
// with a sweep in place of the keyspace notifications.
func runDevRelay(ctx context.Context, r *relay.Relay, logger *slog.Logger) {
	const shards = 1
	swept := make(chan struct{})
	defer func() { <-swept }()
	go func() {
		defer close(swept)
		t := time.NewTicker(devSweepEvery)
		defer t.Stop()
		for {
			if _, err := r.Sweep(ctx, shards); err != nil && ctx.Err() == nil {
				logger.Warn("dev relay: sweep failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	if err := r.Run(ctx, relay.RunConfig{ID: "dev", Shards: shards, LeaseTTL: 5 * time.Second, Workers: 8}); err != nil && ctx.Err() == nil {
		logger.Error("dev relay stopped", "err", err)
	}
}
