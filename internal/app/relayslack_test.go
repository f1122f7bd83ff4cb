package app

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

const slackTestAgent = "agent-00000000-0000-4000-8000-000000000001"

// TestRelaySlackConfigErrorsExit2NamingTheVariable: Slack's settings are
// checked at start, each error naming its variable, the secrets never shown.
func TestRelaySlackConfigErrorsExit2NamingTheVariable(t *testing.T) {
	const token, secret = "xoxb-1-2-sekrit-token-value", "0123456789abcdef0123456789abcdef"
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": slackTestAgent}, "LETTAQ_SLACK_SIGNING_SECRET"},
		{map[string]string{"LETTAQ_SLACK_SIGNING_SECRET": secret, "LETTAQ_RELAY_AGENT_ID": slackTestAgent}, "LETTAQ_SLACK_BOT_TOKEN"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": "xoxp-a-user-token-sekrit", "LETTAQ_SLACK_SIGNING_SECRET": secret, "LETTAQ_RELAY_AGENT_ID": slackTestAgent}, "LETTAQ_SLACK_BOT_TOKEN=(secret)"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_SIGNING_SECRET": "sekrit"}, "LETTAQ_SLACK_SIGNING_SECRET=(secret)"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_SIGNING_SECRET": secret}, "LETTAQ_RELAY_AGENT_ID"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_SIGNING_SECRET": secret, "LETTAQ_RELAY_AGENT_ID": slackTestAgent, "LETTAQ_HTTP_ADDR": "off"}, "LETTAQ_HTTP_ADDR is off"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_SIGNING_SECRET": secret, "LETTAQ_RELAY_AGENT_ID": slackTestAgent, "LETTAQ_SLACK_API_URL": "slack.com/api"}, "LETTAQ_SLACK_API_URL"},
		{map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_SIGNING_SECRET": secret, "LETTAQ_RELAY_AGENT_ID": slackTestAgent, "LETTAQ_SLACK_PART_LIMIT": "4000"}, "LETTAQ_SLACK_PART_LIMIT"},
	} {
		var out, errOut bytes.Buffer
		code := RunRelay(context.Background(), nil, func(k string) string { return tc.env[k] }, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("env %v: exit %d, stderr %q; want exit 2 naming %s", tc.env, code, errOut.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "sekrit") {
			t.Errorf("a secret in the error: %q", errOut.String())
		}
	}
}

// TestRelaySlackBadTokenStopsTheStart: a token Slack refuses (auth.test)
// stops the relay at its start, exit 1, the token not in the log.
func TestRelaySlackBadTokenStopsTheStart(t *testing.T) {
	f := slackfake.New(slackfake.Options{})
	defer f.Stop()
	env := map[string]string{"LETTAQ_SLACK_BOT_TOKEN": "xoxb-not-the-fakes-sekrit", "LETTAQ_SLACK_SIGNING_SECRET": f.SigningSecret(),
		"LETTAQ_RELAY_AGENT_ID": slackTestAgent, "LETTAQ_SLACK_API_URL": f.APIURL(), "LETTAQ_HTTP_ADDR": "127.0.0.1:0",
		"REDIS_URL": "redis://127.0.0.1:1/0", "LETTAQ_LOG_FORMAT": "text"}
	var out, errOut bytes.Buffer
	code := RunRelay(context.Background(), nil, func(k string) string { return env[k] }, &out, &errOut)
	if code != ExitFailed || !strings.Contains(errOut.String(), "invalid_auth") || strings.Contains(errOut.String(), "sekrit") {
		t.Fatalf("exit %d, stderr %q; want 1 with invalid_auth, no token", code, errOut.String())
	}
}

// TestRelaySlackSocketModeSettings: an app-level token takes the place of the
// signing secret and of the HTTP listener (Socket Mode); a token that is not
// one is refused, naming the variable, not shown.
func TestRelaySlackSocketModeSettings(t *testing.T) {
	const token = "xoxb-1-2-sekrit-token-value"
	parse := func(env map[string]string) (RelaySettings, error) {
		return ParseRelaySettings(nil, func(k string) string { return env[k] }, nil)
	}
	c, err := parse(map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_APP_TOKEN": "xapp-1-sekrit", "LETTAQ_RELAY_AGENT_ID": slackTestAgent, "LETTAQ_HTTP_ADDR": "off"})
	if err != nil || c.Slack.AppToken != "xapp-1-sekrit" {
		t.Fatalf("Socket Mode without a signing secret or listener: %v", err)
	}
	_, err = parse(map[string]string{"LETTAQ_SLACK_BOT_TOKEN": token, "LETTAQ_SLACK_APP_TOKEN": "xoxb-sekrit", "LETTAQ_RELAY_AGENT_ID": slackTestAgent})
	if err == nil || !strings.Contains(err.Error(), "LETTAQ_SLACK_APP_TOKEN=(secret)") || strings.Contains(err.Error(), "sekrit") {
		t.Fatalf("a bot token as the app token: %v, want refused naming LETTAQ_SLACK_APP_TOKEN, not shown", err)
	}
}
