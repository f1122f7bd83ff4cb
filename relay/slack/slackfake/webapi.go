package slackfake

import (
	"context"
	"encoding/json"
	"html"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slacktest"

	"github.com/lettaq/lettaq/relay"
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

// WebAPI is the Web API methods the relay's adapter calls (chat.postMessage,
// chat.update, chat.delete, assistant.threads.setStatus, auth.test), with
// the bot token, Slack's sizes and its rate limits.
type WebAPI struct {
	opt Options
	ws  *workspace

	mu      sync.Mutex
	window  map[string][]time.Time
	forced  map[string]int // method → Retry-After seconds of its next call
	counts  map[string]int // method → calls answered ok
	limited map[string]int // method → calls answered 429
}

func newWebAPI(opt Options, ws *workspace) *WebAPI {
	return &WebAPI{opt: opt, ws: ws, window: map[string][]time.Time{}, forced: map[string]int{},
		counts: map[string]int{}, limited: map[string]int{}}
}

func (a *WebAPI) handle(c slacktest.Customize) {
	c.Handle("/chat.postMessage", a.method("chat.postMessage", a.postMessage))
	c.Handle("/chat.update", a.method("chat.update", a.update))
	c.Handle("/chat.delete", a.method("chat.delete", a.delete))
	c.Handle("/assistant.threads.setStatus", a.method("assistant.threads.setStatus", a.setStatus))
	c.Handle("/auth.test", a.method("auth.test", authTest))
}

// RateLimitNext makes the next call of method answer 429 with Retry-After
// retryAfter (whole seconds, as Slack sends it).
func (a *WebAPI) RateLimitNext(method string, retryAfter int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.forced[method] = retryAfter
}

// Counts returns, per method, the calls answered ok and the calls answered 429.
func (a *WebAPI) Counts() (ok, limited map[string]int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	ok, limited = map[string]int{}, map[string]int{}
	for k, v := range a.counts {
		ok[k] = v
	}
	for k, v := range a.limited {
		limited[k] = v
	}
	return ok, limited
}

// apiError is a Slack error answer: HTTP 200, ok false.
type apiError string

// method wraps a Web API method: the token, the form, the rate limits.
func (a *WebAPI) method(name string, h func(form map[string]string) (any, apiError)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := r.ParseForm(); err != nil {
			writeJSON(w, map[string]any{"ok": false, "error": "invalid_form_data"})
			return
		}
		token := r.PostForm.Get("token")
		if bearer, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			token = bearer
		}
		if token != a.opt.Token {
			writeJSON(w, map[string]any{"ok": false, "error": "invalid_auth"})
			return
		}
		form := map[string]string{}
		for k := range r.PostForm {
			form[k] = r.PostForm.Get(k)
		}
		if ra := a.admit(name, form); ra > 0 {
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
		a.mu.Lock()
		a.counts[name]++
		a.mu.Unlock()
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
func (a *WebAPI) admit(method string, form map[string]string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if ra, ok := a.forced[method]; ok {
		delete(a.forced, method)
		a.limited[method]++
		return max(ra, 1)
	}
	now := time.Now()
	key, limit, span := method, a.opt.PerMinute[method], time.Minute
	if method == "chat.postMessage" {
		key, limit, span = method+" "+form["channel"], a.opt.PostBurst, a.opt.PostPerChannel*time.Duration(a.opt.PostBurst)
	}
	if limit <= 0 {
		return 0
	}
	calls := a.window[key]
	for len(calls) > 0 && now.Sub(calls[0]) >= span {
		calls = calls[1:]
	}
	if len(calls) >= limit {
		a.window[key] = calls
		a.limited[method]++
		wait := span - now.Sub(calls[0])
		return max(int((wait+time.Second-1)/time.Second), 1)
	}
	a.window[key] = append(calls, now)
	return 0
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func authTest(map[string]string) (any, apiError) {
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

func (a *WebAPI) postMessage(form map[string]string) (any, apiError) {
	channel := form["channel"]
	if channel == "" {
		return nil, "channel_not_found"
	}
	m, errCode := content(form)
	if errCode != "" {
		return nil, errCode
	}
	conv := relayslack.Conversation(channel, form["thread_ts"])
	id, err := a.ws.platform.Send(context.Background(), conv, m)
	if err != nil {
		return nil, "internal_error"
	}
	ts := a.ws.appSaid(channel, form["thread_ts"], msgRef{id: id, conv: conv.ChatID})
	return map[string]any{"channel": channel, "ts": ts, "message": map[string]any{"ts": ts, "thread_ts": form["thread_ts"], "text": m.Text}}, ""
}

func (a *WebAPI) update(form map[string]string) (any, apiError) {
	channel, ts := form["channel"], form["ts"]
	ref, ok := a.ws.lookup(channel, ts)
	if !ok {
		return nil, "message_not_found"
	}
	m, errCode := content(form)
	if errCode != "" {
		return nil, errCode
	}
	if err := a.ws.platform.Edit(context.Background(), queueConv(ref.conv), ref.id, m); err != nil {
		return nil, "message_not_found" // deleted
	}
	return map[string]any{"channel": channel, "ts": ts, "text": m.Text}, ""
}

func (a *WebAPI) delete(form map[string]string) (any, apiError) {
	channel, ts := form["channel"], form["ts"]
	ref, ok := a.ws.forget(channel, ts)
	if !ok {
		return nil, "message_not_found"
	}
	_ = a.ws.platform.Delete(context.Background(), queueConv(ref.conv), ref.id)
	return map[string]any{"channel": channel, "ts": ts}, ""
}

func (a *WebAPI) setStatus(form map[string]string) (any, apiError) {
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
	_ = a.ws.platform.Status(context.Background(), relayslack.Conversation(channel, thread), s)
	return nil, ""
}
