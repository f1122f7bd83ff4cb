package slack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/slack-go/slack"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// DefaultLimits are Slack's sizes and paces as the relay needs them: a
// part of at most 3,000 characters (a Block Kit section's limit, so that an
// approval request fits one; Slack reads best under ~4,000), and a status
// that Slack clears after 2 minutes.
var DefaultLimits = relay.Limits{PartLimit: 3000, StatusTTL: 2 * time.Minute}

// ThinkingStatus is the status shown while a turn runs ("<app> is thinking…").
const ThinkingStatus = "is thinking…"

// Adapter is the relay.Adapter of Slack.
type Adapter struct {
	api    *slack.Client
	limits relay.Limits
	pace   *pacer
}

// New returns the adapter on api (slack.New(botToken, ...)), paced at
// DefaultPace.
func New(api *slack.Client) *Adapter {
	return &Adapter{api: api, limits: DefaultLimits, pace: newPacer(DefaultPace)}
}

// SetPace sets the rates the adapter keeps (pace.go); a zero Rate is not
// paced.
func (a *Adapter) SetPace(p Pace) { a.pace = newPacer(p) }

// Method names, also the pace's keys.
const (
	postMessage = "chat.postMessage"
	update      = "chat.update"
	deleteMsg   = "chat.delete"
	setStatus   = "assistant.threads.setStatus"
)

// paced is the relay's error for a call the pace put off.
func paced(wait time.Duration) error {
	return &relay.RateLimitedError{RetryAfter: wait, Paced: true}
}

// slack429 tells the pace of Slack's 429 for key, and returns err.
func (a *Adapter) slack429(key string, err error) error {
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		a.pace.limited(key, rl.RetryAfter)
	}
	return err
}

// Limits implements relay.Adapter.
func (a *Adapter) Limits() relay.Limits { return a.limits }

// Send implements relay.Adapter: chat.postMessage in the thread.
func (a *Adapter) Send(ctx context.Context, chat record.Conversation, m relay.Message) (string, error) {
	channel, thread := Where(chat)
	key := postMessage + " " + channel
	if wait := a.pace.take(key, a.pace.pace.Post, m.Growing, "", false); wait > 0 {
		return "", paced(wait)
	}
	opts := content(m)
	if thread != "" {
		opts = append(opts, slack.MsgOptionTS(thread))
	}
	_, ts, err := a.api.PostMessageContext(ctx, channel, opts...)
	if err != nil {
		return "", classify(postMessage, a.slack429(key, err))
	}
	if m.Growing {
		a.pace.shown(channel+"/"+ts, true)
	}
	return ts, nil
}

// Edit implements relay.Adapter: chat.update. Slack takes an update to the
// same content as any other; a message gone is permanent.
func (a *Adapter) Edit(ctx context.Context, chat record.Conversation, id string, m relay.Message) error {
	channel, _ := Where(chat)
	msg := channel + "/" + id
	if wait := a.pace.take(update, a.pace.pace.Update, m.Growing, msg, true); wait > 0 {
		return paced(wait)
	}
	_, _, _, err := a.api.UpdateMessageContext(ctx, channel, id, content(m)...)
	err = classify(update, a.slack429(update, err))
	if err == nil || errors.Is(err, relay.ErrPermanent) {
		a.pace.shown(msg, err == nil && m.Growing)
	}
	return err
}

// Delete implements relay.Adapter: chat.delete; a message already gone is
// success.
func (a *Adapter) Delete(ctx context.Context, chat record.Conversation, id string) error {
	channel, _ := Where(chat)
	if wait := a.pace.take(deleteMsg, a.pace.pace.Delete, false, "", false); wait > 0 {
		return paced(wait)
	}
	_, _, err := a.api.DeleteMessageContext(ctx, channel, id)
	if err == nil || apiCode(err) == "message_not_found" {
		a.pace.shown(channel+"/"+id, false)
		return nil
	}
	return classify(deleteMsg, a.slack429(deleteMsg, err))
}

// Status implements relay.Adapter: assistant.threads.setStatus in the
// thread ("" clears it). A DM outside a thread has no status to set.
func (a *Adapter) Status(ctx context.Context, chat record.Conversation, s relay.Status) error {
	channel, thread := Where(chat)
	if thread == "" {
		return nil
	}
	p := slack.AssistantThreadsSetStatusParameters{ChannelID: channel, ThreadTS: thread}
	switch s.Kind {
	case relay.StatusTyping:
		p.Status = ThinkingStatus
	case relay.StatusTool:
		p.Status = "is running " + oneLine(s.Text, 100)
	}
	// A status is a hint: one that finds no room, or that Slack refuses
	// for its rate, is left out rather than hold the answer up (Slack clears
	// a status with the app's next reply, and after two minutes).
	if wait := a.pace.take(setStatus, a.pace.pace.Status, false, "", false); wait > 0 {
		return nil
	}
	err := a.api.SetAssistantThreadsStatusContext(ctx, p)
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		a.pace.limited(setStatus, rl.RetryAfter)
		return nil
	}
	if err != nil && apiCode(err) != "" && !transient(apiCode(err)) {
		// A status Slack refuses (the app lacks the assistant feature in
		// that channel) must not hold the answer up.
		return fmt.Errorf("slack: assistant.threads.setStatus: %s: %w", apiCode(err), relay.ErrPermanent)
	}
	return classify(setStatus, err)
}

// content is a message's options: markdown_text alone, or Block Kit when
// it has buttons (a section with the text, an actions block) with the text
// as the notification's fallback.
func content(m relay.Message) []slack.MsgOption {
	if len(m.Buttons) == 0 {
		return []slack.MsgOption{slack.MsgOptionMarkdownText(m.Text)}
	}
	var buttons []slack.BlockElement
	for i, b := range m.Buttons {
		buttons = append(buttons, slack.NewButtonBlockElement(fmt.Sprintf("relay_%d", i), b.Data,
			slack.NewTextBlockObject(slack.PlainTextType, oneLine(b.Label, 75), true, false)))
	}
	section := slack.NewSectionBlock(slack.NewTextBlockObject(slack.MarkdownType, cut(escape(m.Text), 3000), false, false), nil, nil)
	return []slack.MsgOption{
		slack.MsgOptionText(cut(m.Text, 3000), true),
		slack.MsgOptionBlocks(section, slack.NewActionBlock("relay_buttons", buttons...)),
	}
}

// escape makes text Slack mrkdwn: &, < and > escaped.
func escape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// cut shortens s to at most n characters, with an ellipsis.
func cut(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func oneLine(s string, n int) string {
	return cut(strings.Join(strings.Fields(s), " "), n)
}

// apiCode is the error code of Slack's answer ok:false, or "".
func apiCode(err error) string {
	var se slack.SlackErrorResponse
	if errors.As(err, &se) {
		return se.Err
	}
	return ""
}

// transient are the API errors Slack documents as worth retrying.
func transient(code string) bool {
	switch code {
	case "internal_error", "fatal_error", "service_unavailable", "request_timeout", "ratelimited":
		return true
	}
	return false
}

// classify maps a slack-go error onto the relay's: 429 → RateLimitedError,
// an API error that retrying cannot cure → ErrPermanent, the rest (network,
// 5xx) retried. The bot token never appears in slack-go's errors.
func classify(method string, err error) error {
	if err == nil {
		return nil
	}
	var rl *slack.RateLimitedError
	if errors.As(err, &rl) {
		return &relay.RateLimitedError{RetryAfter: rl.RetryAfter}
	}
	if code := apiCode(err); code != "" && !transient(code) {
		return fmt.Errorf("slack: %s: %s: %w", method, code, relay.ErrPermanent)
	}
	return fmt.Errorf("slack: %s: %w", method, err)
}

// SetPartLimit sets the longest message part, in characters (at most 3,000).
func (a *Adapter) SetPartLimit(n int) {
	if n > 0 && n <= DefaultLimits.PartLimit {
		a.limits.PartLimit = n
	}
}
