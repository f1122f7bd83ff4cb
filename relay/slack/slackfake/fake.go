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
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	relayslack "github.com/lettaq/lettaq/relay/slack"
)

// Slack's sizes (docs.slack.dev, late 2026).
const (
	MaxText         = 40000 // a message's text
	MaxMarkdownText = 12000 // markdown_text
	MaxBlocks       = 50    // blocks in a message
	MaxSectionText  = 3000  // a section block's text
	MaxButtonValue  = 2000  // a button's value
)

// DefaultPerMinute are the calls a method takes in any minute, per app and
// workspace: Slack's tiers (Tier 2 ~20, Tier 3 ~50, Tier 4 ~100).
// chat.postMessage is limited per channel instead (PostPerChannel).
var DefaultPerMinute = map[string]int{
	"chat.update":                 50,  // Tier 3
	"chat.delete":                 50,  // Tier 3
	"assistant.threads.setStatus": 100, // not published: taken as Tier 4
}

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

// Fake is the fake Slack. The zero value is not usable: call New.
type Fake struct {
	*slacktest.Server
	// Platform holds what the fake shows, per relay conversation.
	Platform *fakeplatform.Platform
	opt      Options

	mu      sync.Mutex
	seq     int
	byTS    map[string]msgRef // channel/ts → the platform's message
	said    []said            // every message of the conversations, the users' and the app's, in order
	app     string            // the app's request URL base (SetApp), "" until set
	sock    socketSide
	window  map[string][]time.Time
	forced  map[string]int // method → Retry-After seconds of its next call
	counts  map[string]int // method → calls answered ok
	limited map[string]int // method → calls answered 429
}

type msgRef struct {
	id   string
	conv string // the relay conversation's chat id
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
	f := &Fake{
		Platform: fakeplatform.New(relayslack.DefaultLimits),
		opt:      opt,
		byTS:     map[string]msgRef{},
		window:   map[string][]time.Time{},
		forced:   map[string]int{},
		counts:   map[string]int{},
		limited:  map[string]int{},
		sock:     socketSide{outbox: make(chan []byte, 256), acked: map[string]bool{}, changed: make(chan struct{})},
	}
	f.Server = slacktest.NewTestServer(func(c slacktest.Customize) {
		c.Handle("/chat.postMessage", f.method("chat.postMessage", f.postMessage))
		c.Handle("/chat.update", f.method("chat.update", f.update))
		c.Handle("/chat.delete", f.method("chat.delete", f.delete))
		c.Handle("/assistant.threads.setStatus", f.method("assistant.threads.setStatus", f.setStatus))
		c.Handle("/auth.test", f.method("auth.test", f.authTest))
		f.userSide(c)
		f.socketHandlers(c)
	})
	f.Server.Start()
	return f
}

// APIURL is the address to give slack.OptionAPIURL.
func (f *Fake) APIURL() string { return f.GetAPIURL() }

// Token is the bot token the fake accepts.
func (f *Fake) Token() string { return f.opt.Token }

// SigningSecret is the secret the fake signs inbound requests with.
func (f *Fake) SigningSecret() string { return f.opt.SigningSecret }

// RateLimitNext makes the next call of method answer 429 with Retry-After
// retryAfter (whole seconds, as Slack sends it).
func (f *Fake) RateLimitNext(method string, retryAfter int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.forced[method] = retryAfter
}

// Counts returns, per method, the calls answered ok and the calls answered 429.
func (f *Fake) Counts() (ok, limited map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ok, limited = map[string]int{}, map[string]int{}
	for k, v := range f.counts {
		ok[k] = v
	}
	for k, v := range f.limited {
		limited[k] = v
	}
	return ok, limited
}

// apiError is a Slack error answer: HTTP 200, ok false.
type apiError string

// method wraps a Web API method: the token, the form, the rate limits.
func (f *Fake) method(name string, h func(form map[string]string) (any, apiError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, map[string]any{"ok": false, "error": "invalid_form_data"})
			return
		}
		token := r.PostForm.Get("token")
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			token = bearer
		}
		if token != f.opt.Token {
			writeJSON(w, map[string]any{"ok": false, "error": "invalid_auth"})
			return
		}
		form := map[string]string{}
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
		if ra := f.admit(name, form); ra > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(ra))
			w.WriteHeader(http.StatusTooManyRequests)
			writeJSON(w, map[string]any{"ok": false, "error": "ratelimited"})
			return
		}
		res, errCode := h(form)
		if errCode != "" {
			writeJSON(w, map[string]any{"ok": false, "error": string(errCode)})
			return
		}
		f.mu.Lock()
		f.counts[name]++
		f.mu.Unlock()
		out := map[string]any{"ok": true}
		if m, ok := res.(map[string]any); ok {
			for k, v := range m {
				out[k] = v
			}
		}
		writeJSON(w, out)
	}
}

// admit applies the rate limits: it returns 0 to take the call, or the
// Retry-After in seconds.
func (f *Fake) admit(method string, form map[string]string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ra, ok := f.forced[method]; ok {
		delete(f.forced, method)
		f.limited[method]++
		return max(ra, 1)
	}
	now := time.Now()
	key, limit, span := method, f.opt.PerMinute[method], time.Minute
	if method == "chat.postMessage" {
		key, limit, span = method+" "+form["channel"], f.opt.PostBurst, f.opt.PostPerChannel*time.Duration(f.opt.PostBurst)
	}
	if limit <= 0 {
		return 0
	}
	calls := f.window[key]
	for len(calls) > 0 && now.Sub(calls[0]) >= span {
		calls = calls[1:]
	}
	if len(calls) >= limit {
		f.window[key] = calls
		f.limited[method]++
		wait := span - now.Sub(calls[0])
		return max(int((wait+time.Second-1)/time.Second), 1)
	}
	f.window[key] = append(calls, now)
	return 0
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *Fake) authTest(map[string]string) (any, apiError) {
	return map[string]any{"url": "https://fake.slack.com/", "team": "Fake", "user": "lettaq", "team_id": "T0FAKE", "user_id": "U0BOT", "bot_id": "B0BOT"}, ""
}

// content reads a message's content from chat.postMessage / chat.update's
// form, checking Slack's sizes.
func content(form map[string]string) (relay.Message, apiError) {
	md, text, rawBlocks := form["markdown_text"], form["text"], form["blocks"]
	if md != "" && (text != "" || rawBlocks != "") {
		return relay.Message{}, "invalid_arguments" // markdown_text goes alone
	}
	if md != "" {
		if len([]rune(md)) > MaxMarkdownText {
			return relay.Message{}, "msg_too_long"
		}
		return relay.Message{Text: md}, ""
	}
	if len([]rune(text)) > MaxText {
		return relay.Message{}, "msg_too_long"
	}
	m := relay.Message{Text: html.UnescapeString(text)}
	if rawBlocks != "" {
		var blocks slack.Blocks
		if err := json.Unmarshal([]byte(rawBlocks), &blocks); err != nil || len(blocks.BlockSet) > MaxBlocks {
			return relay.Message{}, "invalid_blocks"
		}
		var shown []string
		for _, b := range blocks.BlockSet {
			switch b := b.(type) {
			case *slack.SectionBlock:
				if b.Text == nil || len([]rune(b.Text.Text)) > MaxSectionText {
					return relay.Message{}, "invalid_blocks"
				}
				shown = append(shown, html.UnescapeString(b.Text.Text))
			case *slack.ActionBlock:
				if b.Elements == nil {
					continue
				}
				for _, e := range b.Elements.ElementSet {
					btn, ok := e.(*slack.ButtonBlockElement)
					if !ok || btn.Text == nil || len(btn.Value) > MaxButtonValue {
						return relay.Message{}, "invalid_blocks"
					}
					m.Buttons = append(m.Buttons, relay.Button{Label: btn.Text.Text, Data: btn.Value})
				}
			}
		}
		if len(shown) > 0 {
			m.Text = strings.Join(shown, "\n")
		}
	}
	if m.Text == "" && len(m.Buttons) == 0 {
		return relay.Message{}, "no_text"
	}
	return m, ""
}

func (f *Fake) postMessage(form map[string]string) (any, apiError) {
	channel := form["channel"]
	if channel == "" {
		return nil, "channel_not_found"
	}
	m, errCode := content(form)
	if errCode != "" {
		return nil, errCode
	}
	conv := relayslack.Conversation(channel, form["thread_ts"])
	id, err := f.Platform.Send(context.Background(), conv, m)
	if err != nil {
		return nil, "internal_error"
	}
	f.mu.Lock()
	f.seq++
	ts := fmt.Sprintf("1700000000.%06d", f.seq)
	f.byTS[channel+"/"+ts] = msgRef{id: id, conv: conv.ChatID}
	f.said = append(f.said, said{channel: channel, ts: ts, thread: form["thread_ts"], ref: msgRef{id: id, conv: conv.ChatID}})
	f.mu.Unlock()
	return map[string]any{"channel": channel, "ts": ts, "message": map[string]any{"ts": ts, "thread_ts": form["thread_ts"], "text": m.Text}}, ""
}

func (f *Fake) lookup(channel, ts string) (msgRef, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ref, ok := f.byTS[channel+"/"+ts]
	return ref, ok
}

func (f *Fake) update(form map[string]string) (any, apiError) {
	channel, ts := form["channel"], form["ts"]
	ref, ok := f.lookup(channel, ts)
	if !ok {
		return nil, "message_not_found"
	}
	m, errCode := content(form)
	if errCode != "" {
		return nil, errCode
	}
	conv := queueConv(ref.conv)
	if err := f.Platform.Edit(context.Background(), conv, ref.id, m); err != nil {
		return nil, "message_not_found" // deleted
	}
	return map[string]any{"channel": channel, "ts": ts, "text": m.Text}, ""
}

func (f *Fake) delete(form map[string]string) (any, apiError) {
	channel, ts := form["channel"], form["ts"]
	ref, ok := f.lookup(channel, ts)
	if !ok {
		return nil, "message_not_found"
	}
	f.mu.Lock()
	delete(f.byTS, channel+"/"+ts)
	f.mu.Unlock()
	_ = f.Platform.Delete(context.Background(), queueConv(ref.conv), ref.id)
	return map[string]any{"channel": channel, "ts": ts}, ""
}

func (f *Fake) setStatus(form map[string]string) (any, apiError) {
	channel, thread := form["channel_id"], form["thread_ts"]
	if channel == "" {
		return nil, "channel_not_found"
	}
	if thread == "" {
		return nil, "invalid_thread_ts"
	}
	if len(strings.Split(form["loading_messages"], ",")) > 10 {
		return nil, "invalid_arguments"
	}
	s := relay.Status{Kind: relay.StatusTyping, Text: form["status"]}
	if s.Text == "" {
		s.Kind = relay.StatusClear
	}
	_ = f.Platform.Status(context.Background(), relayslack.Conversation(channel, thread), s)
	return nil, ""
}

func queueConv(chatID string) queue.Conversation {
	return queue.Conversation{Integration: relayslack.Integration, ChatID: chatID}
}
