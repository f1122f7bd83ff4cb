package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// startDevSlack runs the relay with its Slack adapter against a fake Slack
// (relay/slack/slackfake) on a loopback port: the fake's user side sends the
// app signed events as Slack would, and the relay's Web API calls go to the
// fake. The relay is configured as the production one is, the fake's token,
// signing secret and address in place of a real app's.
func startDevSlack(ctx context.Context, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (*devRelay, error) {
	f := slackfake.New(slackfake.Options{})
	addr, stopped, err := runRelayInProcess(ctx, map[string]string{
		"LETTAQ_SLACK_BOT_TOKEN":      f.Token(),
		"LETTAQ_SLACK_SIGNING_SECRET": f.SigningSecret(),
		"LETTAQ_SLACK_API_URL":        f.APIURL(),
	}, cfg, dev, logger)
	if err != nil {
		f.Stop()
		return nil, err
	}
	f.User.SetApp("http://" + addr + SlackPath)
	done := make(chan struct{})
	go func() { <-stopped; f.Stop(); close(done) }()
	return &devRelay{
		greet: func(w io.Writer) { printSlackGreeting(w, f.User.URL(), f.APIURL(), "http://"+addr+SlackPath) },
		done:  done,
	}, nil
}

func printSlackGreeting(w io.Writer, user, api, app string) {
	fmt.Fprintf(w, `Slack (--relay slack): the relay runs in this process with its Slack adapter, the app answering as
agent %[4]q, against a fake Slack (Web API at %[2]s). Write to the app as a Slack user: the fake signs
each request as Slack does and sends it to the relay at %[3]sevents; it answers what the relay answered.
  curl -sS --data-urlencode 'text=hello' %[1]sdm                        # a direct message to the app
  curl -sS %[1]smessages                                                 # the DM: your messages and the app's, as shown now
  curl -sS --data-urlencode 'text=what is lettaq?' %[1]smention         # @lettaq in channel %[5]s: answered in the message's thread
  curl -sS '%[1]smessages?channel=%[5]s&thread=<ts>'                     # that thread (<ts>: the mention's, as answered)
  curl -sS --data-urlencode 'text=[[sim approval=send_email]] email the team' %[1]sdm   # Approve / Deny buttons
  curl -sS -d value=<a button's value> %[1]spress                       # press one (values: in /messages)
  curl -sS --data-urlencode 'text=[[sim think=30s]] think' %[1]sdm; curl -sS --data-urlencode 'text=stop' %[1]sdm   # stop an answer
With a real app's token and signing secret and no --dev, the relay command is the production app (docs/slack.md).

`, user, api, app, DemoAgent, slackfake.DevChannel)
}
