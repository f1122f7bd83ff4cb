package slack

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strings"

	"github.com/slack-go/slack"
	"github.com/slack-go/slack/slackevents"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Enqueuer makes a Slack message a turn (queue.Client).
type Enqueuer interface {
	Enqueue(ctx context.Context, m queue.Message) (queue.EnqueueResult, error)
}

// Controls are the relay's chat commands and buttons (*relay.Relay).
type Controls interface {
	Command(ctx context.Context, c record.Conversation, text, sender string) (queue.CancelResult, error)
	Press(ctx context.Context, c record.Conversation, data, sender string) (queue.EnqueueResult, error)
}

// Inbound serves Slack's requests to the app: POST /events (the Events
// API's request URL), /interactivity (button presses) and /commands (the
// /stop slash command). Every request must carry a valid signature of the
// signing secret, at most five minutes old.
type Inbound struct {
	// SigningSecret is the app's signing secret. Required.
	SigningSecret string
	// AgentID answers every Slack conversation. Required.
	AgentID  string
	Enqueue  Enqueuer
	Controls Controls
	Logger   *slog.Logger
}

// maxBody is the largest request read; Slack's events are far smaller.
const maxBody = 1 << 20

// ServeHTTP implements http.Handler.
func (in *Inbound) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		http.Error(w, "body unreadable or too large", http.StatusRequestEntityTooLarge)
		return
	}
	sv, err := slack.NewSecretsVerifier(r.Header, in.SigningSecret)
	if err == nil {
		_, _ = sv.Write(body)
		err = sv.Ensure()
	}
	if err != nil {
		in.log().Warn("slack: refused an unsigned or stale request", "path", r.URL.Path, "err", err)
		http.Error(w, "invalid signature", http.StatusUnauthorized)
		return
	}
	switch strings.TrimSuffix(r.URL.Path[strings.LastIndex(r.URL.Path, "/"):], "/") {
	case "/events":
		in.event(r.Context(), w, body)
	case "/interactivity":
		in.interaction(r.Context(), w, body)
	case "/commands":
		in.command(r.Context(), w, body)
	default:
		http.NotFound(w, r)
	}
}

func (in *Inbound) log() *slog.Logger {
	if in.Logger != nil {
		return in.Logger
	}
	return slog.Default()
}

// mention matches a user mention (<@U123> or <@U123|name>).
var mention = regexp.MustCompile(`<@[A-Z0-9]+(\|[^>]*)?>`)

// event handles an Events API request. It answers 200 once the message is
// enqueued (or ignored), and 500 when the enqueue failed, so that Slack
// delivers the event again: the enqueue's message id (channel/ts) makes a
// redelivered event one task.
func (in *Inbound) event(ctx context.Context, w http.ResponseWriter, body []byte) {
	code, reply := in.handleEvent(ctx, body)
	switch {
	case code != http.StatusOK:
		http.Error(w, reply, code)
	case reply != "":
		w.Header().Set("Content-Type", "text/plain")
		_, _ = io.WriteString(w, reply)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// handleEvent takes an Events API payload (over HTTP or Socket Mode): it
// answers 200 once the message is enqueued (or ignored; reply is a
// url_verification's challenge), 400 for an unreadable one, and 500 when the
// enqueue failed, so that Slack delivers the event again.
func (in *Inbound) handleEvent(ctx context.Context, body []byte) (code int, reply string) {
	ev, err := slackevents.ParseEvent(json.RawMessage(body), slackevents.OptionNoVerifyToken())
	if err != nil {
		return http.StatusBadRequest, "unreadable event"
	}
	switch ev.Type {
	case slackevents.URLVerification:
		var ch slackevents.ChallengeResponse
		if err := json.Unmarshal(body, &ch); err != nil {
			return http.StatusBadRequest, "unreadable challenge"
		}
		return http.StatusOK, ch.Challenge
	case slackevents.CallbackEvent:
	default:
		return http.StatusOK, ""
	}
	var channel, ts, thread, user, text string
	switch e := ev.InnerEvent.Data.(type) {
	case *slackevents.AppMentionEvent:
		if e.BotID != "" || e.Edited != nil {
			break
		}
		// A mention in a channel opens (or continues) its thread.
		channel, ts, user, text = e.Channel, e.TimeStamp, e.User, e.Text
		thread = e.ThreadTimeStamp
		if thread == "" {
			thread = e.TimeStamp
		}
	case *slackevents.MessageEvent:
		// Direct messages only (a channel's messages come as mentions);
		// not the bot's own, not edits or deletions.
		if e.ChannelType != "im" || e.BotID != "" || e.User == "" || (e.SubType != "" && e.SubType != "file_share") {
			break
		}
		channel, ts, thread, user, text = e.Channel, e.TimeStamp, e.ThreadTimeStamp, e.User, e.Text
	}
	if channel == "" || ts == "" {
		return http.StatusOK, ""
	}
	conv := Conversation(channel, thread)
	text = strings.TrimSpace(mention.ReplaceAllString(text, ""))
	if isStop(text) {
		in.stop(ctx, conv, user)
		return http.StatusOK, ""
	}
	if text == "" {
		return http.StatusOK, ""
	}
	res, err := in.Enqueue.Enqueue(ctx, queue.Message{
		AgentID: in.AgentID, Text: text, SenderID: user, Conversation: conv,
		MessageID: channel + "/" + ts,
	})
	_, invalid := queue.IsValidationError(err)
	var conflict *queue.MessageIDConflictError
	switch {
	case invalid || errors.As(err, &conflict):
		in.log().Warn("slack: message refused", "chat", conv.String(), "err", err)
		return http.StatusOK, "" // delivering it again cannot cure it
	case err != nil:
		in.log().Error("slack: enqueue failed; Slack will deliver the event again", "chat", conv.String(), "err", err)
		return http.StatusInternalServerError, "enqueue failed"
	}
	in.log().Debug("slack: message enqueued", "chat", conv.String(), "task", res.TaskID, "duplicate", res.Duplicate)
	return http.StatusOK, ""
}

// isStop reports whether a message is the stop command ("stop" or "/stop",
// after the mention).
func isStop(text string) bool {
	f := strings.Fields(strings.ToLower(text))
	return len(f) == 1 && (f[0] == "stop" || f[0] == "/stop")
}

func (in *Inbound) stop(ctx context.Context, conv record.Conversation, user string) {
	if _, err := in.Controls.Command(ctx, conv, "/stop", user); err != nil && !errors.Is(err, queue.ErrNotFound) {
		in.log().Warn("slack: /stop failed", "chat", conv.String(), "err", err)
	}
}

// interaction handles a button press: an approval button goes to the
// relay's Press in the conversation of the message's thread.
func (in *Inbound) interaction(ctx context.Context, w http.ResponseWriter, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return
	}
	var ic slack.InteractionCallback
	if err := json.Unmarshal([]byte(form.Get("payload")), &ic); err != nil {
		http.Error(w, "unreadable payload", http.StatusBadRequest)
		return
	}
	w.WriteHeader(http.StatusOK)
	in.handleInteraction(ctx, ic)
}

// handleInteraction takes a button press (over HTTP or Socket Mode).
func (in *Inbound) handleInteraction(ctx context.Context, ic slack.InteractionCallback) {
	if ic.Type != slack.InteractionTypeBlockActions {
		return
	}
	channel := ic.Container.ChannelID
	if channel == "" {
		channel = ic.Channel.ID
	}
	thread := ic.Container.ThreadTs
	if thread == "" {
		thread = ic.Message.ThreadTimestamp
	}
	conv := Conversation(channel, thread)
	for _, a := range ic.ActionCallback.BlockActions {
		if !strings.HasPrefix(a.Value, "ap:") {
			continue
		}
		if _, err := in.Controls.Press(ctx, conv, a.Value, ic.User.ID); err != nil {
			in.log().Warn("slack: button press not taken", "chat", conv.String(), "err", err)
		}
	}
}

// command handles the /stop slash command. Slack sends no thread with a
// slash command, so it stops the DM's conversation outside threads; in a
// thread the user says "stop" to the app instead (a mention in a channel),
// which the answer tells them.
func (in *Inbound) command(ctx context.Context, w http.ResponseWriter, body []byte) {
	form, err := url.ParseQuery(string(body))
	if err != nil {
		http.Error(w, "unreadable form", http.StatusBadRequest)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(in.handleCommand(ctx, form.Get("channel_id"), form.Get("user_id")))
}

// handleCommand takes the /stop slash command typed by user in channel (over
// HTTP or Socket Mode) and returns the answer the user alone sees.
func (in *Inbound) handleCommand(ctx context.Context, channel, user string) map[string]string {
	reply := "Stopping the answer in this conversation."
	if strings.HasPrefix(channel, "D") {
		in.stop(ctx, Conversation(channel, ""), user)
	} else {
		reply = "Slack does not tell an app which thread a slash command was typed in: to stop an answer, mention me with `stop` in its thread."
	}
	return map[string]string{"response_type": "ephemeral", "text": reply}
}
