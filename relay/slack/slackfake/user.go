package slackfake

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/slack-go/slack/slacktest"
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

// Users is the workspace's people writing to the app: the requests above,
// from a terminal or a test.
type Users struct {
	ws     *workspace
	secret string // signs the requests to the app
	addr   string // the fake's host:port

	mu  sync.Mutex
	app string // the app's request URL base (SetApp), "" until set
}

// SetApp sets where the app takes Slack's requests: base + "events",
// "interactivity" and "commands" (e.g. "http://127.0.0.1:8081/slack/").
func (u *Users) SetApp(base string) {
	u.mu.Lock()
	defer u.mu.Unlock()
	u.app = base
}

// URL is the address of the user side (its requests above).
func (u *Users) URL() string { return "http://" + u.addr + "/user/" }

func (u *Users) handle(c slacktest.Customize) {
	c.Handle("/user/dm", u.userPost(func(r *http.Request) (string, map[string]any, error) { return u.userMessage(r, false) }))
	c.Handle("/user/mention", u.userPost(func(r *http.Request) (string, map[string]any, error) { return u.userMessage(r, true) }))
	c.Handle("/user/press", u.userPost(u.userPress))
	c.Handle("/user/command", u.userPost(u.userCommand))
	c.Handle("/user/messages", u.userMessages)
}

// userPost runs a user's action: it builds the request to the app, sends it
// signed, and answers what the app answered, with the action's facts.
func (u *Users) userPost(act func(r *http.Request) (path string, facts map[string]any, err error)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			userError(w, http.StatusMethodNotAllowed, "POST only (curl -d or --data-urlencode)")
			return
		}
		u.mu.Lock()
		app := u.app
		u.mu.Unlock()
		if app == "" {
			userError(w, http.StatusServiceUnavailable, "no app is set up to receive Slack's requests yet")
			return
		}
		send, facts, err := act(r)
		if err != nil {
			userError(w, http.StatusBadRequest, err.Error())
			return
		}
		resp, err := u.deliver(app, send, facts)
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
func (u *Users) deliver(app, send string, facts map[string]any) (*http.Response, error) {
	in := &Inbound{Secret: u.secret}
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
func (u *Users) userMessage(r *http.Request, mention bool) (string, map[string]any, error) {
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
	ts, eventID := u.ws.userSaid(channel, thread, user, text)
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
func (u *Users) userPress(r *http.Request) (string, map[string]any, error) {
	value := r.FormValue("value")
	if value == "" {
		return "", nil, fmt.Errorf("value is empty: give a button's value, as GET /user/messages lists it")
	}
	for _, m := range u.ws.conversation("", "") {
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
func (u *Users) userCommand(r *http.Request) (string, map[string]any, error) {
	c := command{command: orDefault(r.FormValue("command"), "/stop"), text: r.FormValue("text"),
		channel: orDefault(r.FormValue("channel"), DevDM), user: orDefault(r.FormValue("user"), DevUser)}
	if !strings.HasPrefix(c.command, "/") {
		return "", nil, fmt.Errorf("command %q: a slash command starts with /", c.command)
	}
	return "commands", map[string]any{"command": c.command, "channel": c.channel, "_send": c}, nil
}

// Conversation returns channel's messages (in thread when thread is not
// ""), the users' and the app's, oldest first, the app's as shown now (a
// deleted one left out).
func (u *Users) Conversation(channel, thread string) []Said {
	return u.ws.conversation(channel, thread)
}

// userMessages answers GET /user/messages: the conversation as JSON.
func (u *Users) userMessages(w http.ResponseWriter, r *http.Request) {
	channel := orDefault(r.FormValue("channel"), DevDM)
	list := u.ws.conversation(channel, r.FormValue("thread"))
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
