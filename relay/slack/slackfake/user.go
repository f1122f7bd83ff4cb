package slackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/slack-go/slack/slacktest"

	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// The fake's user side: a person in the workspace writes to the app, as
// Slack would deliver it, from a terminal (curl) or a test. Each request
// below makes the fake send the app a signed request, as Slack signs it, to
// the app's request URLs (SetApp), and answers what the app answered:
//
//	POST /user/dm        text=…  [user=…] [channel=D…] [thread=<ts>]   a direct message (message.im)
//	POST /user/mention   text=…  [user=…] [channel=C…] [thread=<ts>]   @app in a channel (app_mention)
//	POST /user/press     value=<a button's value> [user=…]            a press of the app's button (block_actions)
//	POST /user/command   [command=/stop] [text=…] [channel=…] [user=…]  a slash command
//	GET  /user/messages  [channel=…] [thread=<ts>]                    the conversation: the users' messages and the app's, as shown now
//
// The defaults are the user DevUser, the DM DevDM and the channel DevChannel.
const (
	DevUser    = "U0USER"
	DevDM      = "D0USER"
	DevChannel = "C0DEV"
	// BotUser is the app's user id (auth.test's user_id), as a mention names it.
	BotUser = "U0BOT"
)

// said is one message of a conversation: a user's (user set) or the app's
// (ref set; its text is the platform's, as edited since).
type said struct {
	channel, ts, thread string
	user, text          string
	ref                 msgRef
}

// SetApp sets where the app takes Slack's requests: base + "events",
// "interactivity" and "commands" (e.g. "http://127.0.0.1:8081/slack/").
func (f *Fake) SetApp(base string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.app = base
}

// UserURL is the address of the fake's user side (its requests above).
func (f *Fake) UserURL() string { return "http://" + f.ServerAddr + "/user/" }

func (f *Fake) userSide(c slacktest.Customize) {
	c.Handle("/user/dm", f.userPost(func(r *http.Request) (string, map[string]any, error) { return f.userMessage(r, false) }))
	c.Handle("/user/mention", f.userPost(func(r *http.Request) (string, map[string]any, error) { return f.userMessage(r, true) }))
	c.Handle("/user/press", f.userPost(f.userPress))
	c.Handle("/user/command", f.userPost(f.userCommand))
	c.Handle("/user/messages", f.userMessages)
}

// userPost runs a user's action: it builds the request to the app, sends it
// signed, and answers what the app answered, with the action's facts.
func (f *Fake) userPost(act func(r *http.Request) (path string, facts map[string]any, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			userError(w, http.StatusMethodNotAllowed, "POST only (curl -d or --data-urlencode)")
			return
		}
		f.mu.Lock()
		app := f.app
		f.mu.Unlock()
		if app == "" {
			userError(w, http.StatusServiceUnavailable, "no app is set up to receive Slack's requests yet")
			return
		}
		send, facts, err := act(r)
		if err != nil {
			userError(w, http.StatusBadRequest, err.Error())
			return
		}
		resp, err := f.deliver(app, send, facts)
		if err != nil {
			userError(w, http.StatusBadGateway, "the app did not answer: "+err.Error())
			return
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		facts["app_status"] = resp.StatusCode
		if s := strings.TrimSpace(string(body)); s != "" {
			facts["app_answer"] = s
		}
		facts["ok"] = resp.StatusCode == http.StatusOK
		writeJSON(w, facts)
	}
}

// deliver sends the request an action built: its body is in facts["_send"].
func (f *Fake) deliver(app, send string, facts map[string]any) (*http.Response, error) {
	in := f.Inbound()
	in.HTTP = &http.Client{Timeout: 10 * time.Second}
	req := facts["_send"]
	delete(facts, "_send")
	switch send {
	case "events":
		return in.Event(app+"events", fmt.Sprint(facts["event_id"]), req.(map[string]any), 0)
	case "interactivity":
		p := req.(press)
		return in.Press(app+"interactivity", p.channel, p.thread, p.ts, p.user, p.value)
	default:
		c := req.(command)
		return in.Command(app+"commands", c.command, c.text, c.channel, c.user)
	}
}

type press struct{ channel, thread, ts, user, value string }
type command struct{ command, text, channel, user string }

// userMessage is a user's message to the app: a DM, or a mention in a
// channel (which the app answers in the message's thread).
func (f *Fake) userMessage(r *http.Request, mention bool) (string, map[string]any, error) {
	text := r.FormValue("text")
	if strings.TrimSpace(text) == "" {
		return "", nil, fmt.Errorf("text is empty: send it as text=… (curl --data-urlencode 'text=hello')")
	}
	user, channel, thread := orDefault(r.FormValue("user"), DevUser), r.FormValue("channel"), r.FormValue("thread")
	event := map[string]any{"user": user, "text": text}
	if mention {
		channel = orDefault(channel, DevChannel)
		event["type"], event["text"] = "app_mention", "<@"+BotUser+"> "+text
	} else {
		channel = orDefault(channel, DevDM)
		event["type"], event["channel_type"] = "message", "im"
	}
	f.mu.Lock()
	f.seq++
	ts := fmt.Sprintf("1700000000.%06d", f.seq)
	eventID := fmt.Sprintf("Ev%06d", f.seq)
	f.said = append(f.said, said{channel: channel, ts: ts, thread: thread, user: user, text: text})
	f.mu.Unlock()
	event["channel"], event["ts"] = channel, ts
	facts := map[string]any{"channel": channel, "ts": ts, "event_id": eventID, "_send": event}
	if thread != "" {
		event["thread_ts"] = thread
		facts["thread"] = thread
	} else if mention {
		facts["thread"] = ts // the app answers in the mention's thread
	}
	return "events", facts, nil
}

// userPress presses the app's button whose value is value.
func (f *Fake) userPress(r *http.Request) (string, map[string]any, error) {
	value := r.FormValue("value")
	if value == "" {
		return "", nil, fmt.Errorf("value is empty: give a button's value, as GET /user/messages lists it")
	}
	for _, m := range f.conversation("", "") {
		for _, b := range m.Buttons {
			if b.Value == value {
				p := press{channel: m.channel, thread: m.Thread, ts: m.TS, user: orDefault(r.FormValue("user"), DevUser), value: value}
				return "interactivity", map[string]any{"channel": p.channel, "ts": p.ts, "value": value, "_send": p}, nil
			}
		}
	}
	return "", nil, fmt.Errorf("no message of the app shows a button with value %q", value)
}

// userCommand types a slash command.
func (f *Fake) userCommand(r *http.Request) (string, map[string]any, error) {
	c := command{command: orDefault(r.FormValue("command"), "/stop"), text: r.FormValue("text"),
		channel: orDefault(r.FormValue("channel"), DevDM), user: orDefault(r.FormValue("user"), DevUser)}
	if !strings.HasPrefix(c.command, "/") {
		return "", nil, fmt.Errorf("command %q: a slash command starts with /", c.command)
	}
	return "commands", map[string]any{"command": c.command, "channel": c.channel, "_send": c}, nil
}

// Said is one message of a conversation as GET /user/messages lists it.
type Said struct {
	TS      string   `json:"ts"`
	Thread  string   `json:"thread_ts,omitempty"`
	From    string   `json:"from"` // "app", or the user's id
	Text    string   `json:"text"`
	Buttons []Button `json:"buttons,omitempty"`
	Edits   int      `json:"edits,omitempty"`
	channel string
}

// Button is an app's button as the user sees it: press it with its value.
type Button struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// Conversation returns channel's messages (in thread when thread is not
// ""), the users' and the app's, oldest first, the app's as shown now (a
// deleted one left out).
func (f *Fake) Conversation(channel, thread string) []Said { return f.conversation(channel, thread) }

func (f *Fake) conversation(channel, thread string) []Said {
	f.mu.Lock()
	all := append([]said(nil), f.said...)
	f.mu.Unlock()
	var out []Said
	for _, s := range all {
		if channel != "" && s.channel != channel {
			continue
		}
		if thread != "" && s.thread != thread && s.ts != thread {
			continue
		}
		m := Said{TS: s.ts, Thread: s.thread, From: s.user, Text: s.text, channel: s.channel}
		if s.user == "" {
			shown, ok := f.shown(s.ref)
			if !ok {
				continue
			}
			m.From, m.Text, m.Edits = "app", shown.Text, shown.Edits
			for _, b := range shown.Buttons {
				m.Buttons = append(m.Buttons, Button{Label: b.Label, Value: b.Data})
			}
		}
		out = append(out, m)
	}
	return out
}

// userMessages answers GET /user/messages: the conversation as JSON.
func (f *Fake) userMessages(w http.ResponseWriter, r *http.Request) {
	channel := orDefault(r.FormValue("channel"), DevDM)
	list := f.conversation(channel, r.FormValue("thread"))
	if list == nil {
		list = []Said{}
	}
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	_ = enc.Encode(list)
}

func userError(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]any{"ok": false, "error": msg})
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// shown is the app's message ref as the platform shows it now (false once deleted).
func (f *Fake) shown(ref msgRef) (fakeplatform.Msg, bool) {
	for _, m := range f.Platform.Messages(queueConv(ref.conv)) {
		if m.ID == ref.id {
			return m, true
		}
	}
	return fakeplatform.Msg{}, false
}
