// Package slackfake is Slack's Web API as the relay's Slack adapter meets it,
// in process: slack-go's slacktest server with the methods it lacks added
// (chat.postMessage replaced, chat.update, chat.delete,
// assistant.threads.setStatus), Slack's rules enforced (the bot token,
// message sizes, Block Kit limits, per-method rate limits answered with 429
// and Retry-After), and signed inbound requests (events, button presses,
// slash commands) sent to the app as Slack signs them.
//
// What the fake shows is kept in a fakeplatform.Platform, under the relay's
// Slack conversation of each message (relay/slack.Conversation), so the
// relay's tests count messages, edits and calls the same way for every
// platform.
package slackfake

import (
	"time"

	"github.com/slack-go/slack/slacktest"

	"github.com/lettaq/lettaq/relay/fakeplatform"
	relayslack "github.com/lettaq/lettaq/relay/slack"
)

// Options configure a Fake.
type Options struct {
	// Token is the bot token the API requires (Authorization: Bearer, or the
	// token form field). Default "xoxb-fake".
	Token string
	// SigningSecret signs the requests the fake sends to the app.
	// Default "fake-signing-secret".
	SigningSecret string
	// AppToken is the app-level token Socket Mode's apps.connections.open
	// requires. Default "xapp-fake".
	AppToken string
	// PerMinute overrides DefaultPerMinute, method by method.
	PerMinute map[string]int
	// PostPerChannel is chat.postMessage's pace in one channel: at most
	// PostBurst posts in any PostPerChannel × PostBurst window (Slack: about
	// one a second, short bursts allowed). Default 1s, burst 5.
	PostPerChannel time.Duration
	PostBurst      int
}

// Fake is the fake Slack: one server on loopback whose parts are the Web
// API the app calls (API), Socket Mode (Socket), and the workspace's users
// who write to the app (User). The zero value is not usable: call New.
type Fake struct {
	*slacktest.Server
	// Platform holds what the fake shows, per relay conversation.
	Platform *fakeplatform.Platform
	API      *WebAPI
	Socket   *SocketMode
	User     *Users
	opt      Options
}

// New starts a fake Slack.
func New(opt Options) *Fake {
	if opt.Token == "" {
		opt.Token = "xoxb-fake"
	}
	if opt.SigningSecret == "" {
		opt.SigningSecret = "fake-signing-secret"
	}
	if opt.AppToken == "" {
		opt.AppToken = "xapp-fake"
	}
	if opt.PostPerChannel <= 0 {
		opt.PostPerChannel = time.Second
	}
	if opt.PostBurst <= 0 {
		opt.PostBurst = 5
	}
	per := map[string]int{}
	for k, v := range DefaultPerMinute {
		per[k] = v
	}
	for k, v := range opt.PerMinute {
		per[k] = v
	}
	opt.PerMinute = per
	ws := newWorkspace(fakeplatform.New(relayslack.DefaultLimits))
	f := &Fake{Platform: ws.platform, opt: opt, API: newWebAPI(opt, ws), Socket: newSocketMode(opt.AppToken),
		User: &Users{ws: ws, secret: opt.SigningSecret}}
	f.Server = slacktest.NewTestServer(func(c slacktest.Customize) {
		f.API.handle(c)
		f.User.handle(c)
		f.Socket.handle(c)
	})
	f.Socket.addr, f.User.addr = f.ServerAddr, f.ServerAddr
	f.Server.Start()
	return f
}

// APIURL is the address to give slack.OptionAPIURL.
func (f *Fake) APIURL() string { return f.GetAPIURL() }

// Token is the bot token the fake accepts.
func (f *Fake) Token() string { return f.opt.Token }

// SigningSecret is the secret the fake signs inbound requests with.
func (f *Fake) SigningSecret() string { return f.opt.SigningSecret }

// AppToken is the app-level token the fake's apps.connections.open takes.
func (f *Fake) AppToken() string { return f.opt.AppToken }
