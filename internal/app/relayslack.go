package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/lettaq/lettaq/internal/envvar"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/relay"
	relayslack "github.com/lettaq/lettaq/relay/slack"
)

// SlackSettings configure the relay's Slack adapter (docs/slack.md).
type SlackSettings struct {
	BotToken      string
	SigningSecret string
	// AppToken (xapp-…), set, takes Slack's requests over Socket Mode
	// instead of the HTTP listener.
	AppToken string
	// APIURL is the Web API's address (default Slack's; a fake's in tests).
	APIURL    string
	PartLimit int
}

// enabled reports whether the relay serves Slack.
func (s SlackSettings) enabled() bool {
	return s.BotToken != "" || s.SigningSecret != "" || s.AppToken != ""
}

// SlackPath is where the relay's listener serves Slack's requests:
// <SlackPath>events, <SlackPath>interactivity, <SlackPath>commands.
const SlackPath = "/slack/"

var relaySlackSettings = []relaySetting{
	{envvar.Var{Name: "LETTAQ_SLACK_BOT_TOKEN", Secret: true, Help: "the Slack app's bot token (xoxb-…): the relay serves Slack (chats of integration \"slack\"); needs LETTAQ_SLACK_SIGNING_SECRET, LETTAQ_RELAY_AGENT_ID and the HTTP listener (see docs/slack.md). With a real app's token and secret this is the production app; worker --dev --relay slack runs this same relay against a fake Slack"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && (!strings.HasPrefix(raw, "xoxb-") || strings.ContainsAny(raw, " \t\r\n")) {
				return errors.New("want a bot token, xoxb-… (OAuth & Permissions → Bot User OAuth Token)")
			}
			c.Slack.BotToken = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_SLACK_SIGNING_SECRET", Secret: true, Help: "the Slack app's signing secret (Basic Information → App Credentials): every request Slack sends to " + SlackPath + "… must be signed with it"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && len(raw) < 16 {
				return errors.New("too short for a signing secret (Slack's are 32 hex digits)")
			}
			c.Slack.SigningSecret = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_SLACK_APP_TOKEN", Secret: true, Help: "an app-level token (xapp-…, Basic Information → App-Level Tokens, scope connections:write): Slack's events, button presses and slash commands come over Socket Mode (the relay connects out; no public request URL, no signing secret needed) instead of to " + SlackPath + "…"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && (!strings.HasPrefix(raw, "xapp-") || strings.ContainsAny(raw, " \t\r\n")) {
				return errors.New("want an app-level token, xapp-… (Basic Information → App-Level Tokens)")
			}
			c.Slack.AppToken = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_SLACK_API_URL", Default: slack.APIURL, Help: "Slack's Web API address (a fake Slack's in tests)"},
		func(c *RelaySettings, raw string) error {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || !strings.HasSuffix(raw, "/") {
				return errors.New("want an http(s) address ending in /, e.g. https://slack.com/api/")
			}
			c.Slack.APIURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_SLACK_PART_LIMIT", Default: fmt.Sprint(relayslack.DefaultLimits.PartLimit), Help: "the longest Slack message the relay sends, in characters; a longer answer is split (at most 3000: a Block Kit section)"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.Slack.PartLimit, raw, 1, 3000) }},
}

func init() { relaySettings = append(relaySettings, relaySlackSettings...) }

// checkSlack reports what is missing for Slack, naming the variables.
func checkSlack(c RelaySettings) []error {
	s := c.Slack
	if !s.enabled() {
		return nil
	}
	var errs []error
	if s.BotToken == "" {
		errs = append(errs, errors.New("LETTAQ_SLACK_SIGNING_SECRET or LETTAQ_SLACK_APP_TOKEN is set but LETTAQ_SLACK_BOT_TOKEN (--slack-bot-token) is not: Slack needs the bot token"))
	}
	if s.SigningSecret == "" && s.AppToken == "" {
		errs = append(errs, errors.New("LETTAQ_SLACK_BOT_TOKEN is set but neither LETTAQ_SLACK_SIGNING_SECRET (--slack-signing-secret, for requests to the HTTP listener) nor LETTAQ_SLACK_APP_TOKEN (--slack-app-token, for Socket Mode) is: Slack's requests need one"))
	}
	if c.AgentID == "" {
		errs = append(errs, errors.New("LETTAQ_SLACK_BOT_TOKEN is set but LETTAQ_RELAY_AGENT_ID (--relay-agent-id) is not: the agent that answers the Slack chats"))
	}
	if c.HTTPAddr == "off" && s.AppToken == "" {
		errs = append(errs, errors.New("LETTAQ_SLACK_BOT_TOKEN is set and LETTAQ_HTTP_ADDR is off: Slack's events come to the HTTP listener (or set LETTAQ_SLACK_APP_TOKEN for Socket Mode)"))
	}
	return errs
}

// newSlackAdapter returns the Slack adapter, once auth.test has taken the
// token (a revoked or mistyped token stops the relay at its start, not at
// its first answer).
func newSlackAdapter(ctx context.Context, s SlackSettings, logger *slog.Logger) (*relayslack.Adapter, error) {
	api := slack.New(s.BotToken, slack.OptionAPIURL(s.APIURL))
	who, err := api.AuthTestContext(ctx)
	if err != nil {
		return nil, fmt.Errorf("slack: auth.test with LETTAQ_SLACK_BOT_TOKEN: %w", err)
	}
	logger.Info("relay: serving Slack", "team", who.Team, "bot_user", who.UserID, "events", SlackPath+"events")
	ad := relayslack.New(api)
	ad.SetPartLimit(s.PartLimit)
	return ad, nil
}

// runSlackSocketMode takes Slack's requests over Socket Mode until ctx
// ends, connecting again after a failure.
func runSlackSocketMode(ctx context.Context, s SlackSettings, agentID string, client *queue.Client, r *relay.Relay, logger *slog.Logger) {
	api := slack.New(s.BotToken, slack.OptionAPIURL(s.APIURL), slack.OptionAppLevelToken(s.AppToken))
	in := &relayslack.Inbound{AgentID: agentID, Enqueue: client, Controls: r, Logger: logger}
	for ctx.Err() == nil {
		if err := in.RunSocketMode(ctx, api); err != nil && ctx.Err() == nil {
			logger.Error("slack: Socket Mode stopped; connecting again in 5s", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}
}

// slackInbound is the handler of Slack's requests, mounted at SlackPath
// outside the listener's token: Slack signs them instead.
func slackInbound(s SlackSettings, agentID string, client *queue.Client, r *relay.Relay, logger *slog.Logger) http.Handler {
	return http.StripPrefix(strings.TrimSuffix(SlackPath, "/"), &relayslack.Inbound{
		SigningSecret: s.SigningSecret, AgentID: agentID, Enqueue: client, Controls: r, Logger: logger,
	})
}
