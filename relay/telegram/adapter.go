// Package telegram is the relay's Telegram adapter, on the Bot API library
// github.com/go-telegram/bot: outbound, relay.Adapter (sendMessage,
// editMessageText, deleteMessage, sendChatAction, with Telegram's error
// answers mapped to the relay's rules); inbound, an update becomes a lettaq
// message, a command or a button press (Inbound), taken from getUpdates long
// polling (Poller, its offset kept in Redis) or from a webhook (Webhook, its
// secret token checked).
//
// A chat is the conversation {telegram, "<chat id>"}, or "<chat id>/<topic
// id>" for a topic of a forum group. See docs/telegram.md.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// Integration is the integration name of Telegram's chats.
const Integration = "telegram"

// DefaultServerURL is Telegram's Bot API.
const DefaultServerURL = "https://api.telegram.org"

// Config configures an Adapter.
type Config struct {
	// Token is the bot's token from BotFather. Required; never logged.
	Token string
	// ServerURL is the Bot API's address (default DefaultServerURL; a fake's
	// in tests, a local Bot API server's in production).
	ServerURL string
	// PerSecond bounds the messages (sends and edits) the adapter makes a
	// second over all chats (default 28: under Telegram's global limit of
	// 30 with room for the network's jitter, which can bring two spaced
	// calls closer together at Telegram's end).
	PerSecond int
	// HTTPClient makes the calls (default: a client with a 30 s timeout).
	HTTPClient *http.Client
	// PartLimit is the longest message the relay sends, in UTF-16 code
	// units (default and most: Telegram's 4096; tests set less).
	PartLimit int
	// Logger, when set, tells of a global pause (nil: none).
	Logger *slog.Logger
}

// Adapter is Telegram as the relay drives it (relay.Adapter).
type Adapter struct {
	cfg  Config
	bot  *bot.Bot
	pace *pacer
}

// New returns an Adapter. It makes no call to Telegram.
func New(cfg Config) (*Adapter, error) {
	if cfg.Token == "" {
		return nil, errors.New("telegram: no bot token")
	}
	if cfg.ServerURL == "" {
		cfg.ServerURL = DefaultServerURL
	}
	cfg.ServerURL = strings.TrimRight(cfg.ServerURL, "/")
	if cfg.PerSecond <= 0 {
		cfg.PerSecond = 28
	}
	if cfg.PartLimit <= 0 || cfg.PartLimit > 4096 {
		cfg.PartLimit = 4096
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 30 * time.Second}
	}
	b, err := bot.New(cfg.Token, bot.WithServerURL(cfg.ServerURL), bot.WithSkipGetMe(),
		bot.WithHTTPClient(cfg.HTTPClient.Timeout, cfg.HTTPClient),
		// The library's own error log would be its polling's; it does not poll.
		bot.WithErrorsHandler(func(error) {}))
	if err != nil {
		return nil, fmt.Errorf("telegram: %w", err)
	}
	return &Adapter{cfg: cfg, bot: b, pace: &pacer{every: time.Second / time.Duration(cfg.PerSecond)}}, nil
}

// Limits implements relay.Adapter: 4096 UTF-16 code units a message (or
// Config.PartLimit), typing shown for 5 s.
func (a *Adapter) Limits() relay.Limits {
	return relay.Limits{PartLimit: a.cfg.PartLimit, StatusTTL: 5 * time.Second}
}

// blank is what a message shows while its text is only white space, which
// Telegram refuses ("message text is empty"): a growing answer that begins
// with a line break.
const blank = "…"

func nonBlank(s string) string {
	if strings.TrimSpace(s) == "" {
		return blank
	}
	return s
}

// ChatOf returns the Telegram chat and forum topic of a conversation.
func ChatOf(c record.Conversation) (chat int64, topic int, err error) {
	id, t, hasTopic := strings.Cut(c.ChatID, "/")
	chat, err = strconv.ParseInt(id, 10, 64)
	if err != nil || chat == 0 {
		return 0, 0, fmt.Errorf("telegram: chat id %q is not a Telegram chat: %w", c.ChatID, relay.ErrPermanent)
	}
	if hasTopic {
		if topic, err = strconv.Atoi(t); err != nil || topic <= 0 {
			return 0, 0, fmt.Errorf("telegram: chat id %q has a bad topic: %w", c.ChatID, relay.ErrPermanent)
		}
	}
	return chat, topic, nil
}

// Conversation is the lettaq chat of a Telegram chat and forum topic (0: none).
func Conversation(chat int64, topic int) record.Conversation {
	id := strconv.FormatInt(chat, 10)
	if topic > 0 {
		id += "/" + strconv.Itoa(topic)
	}
	return record.Conversation{Integration: Integration, ChatID: id}
}

func keyboard(bs []relay.Button) models.ReplyMarkup {
	if len(bs) == 0 {
		return nil
	}
	row := make([]models.InlineKeyboardButton, 0, len(bs))
	for _, b := range bs {
		row = append(row, models.InlineKeyboardButton{Text: b.Label, CallbackData: b.Data})
	}
	return &models.InlineKeyboardMarkup{InlineKeyboard: [][]models.InlineKeyboardButton{row}}
}

// Send implements relay.Adapter: sendMessage in HTML, again in plain text
// when Telegram refuses the entities.
func (a *Adapter) Send(ctx context.Context, c record.Conversation, m relay.Message) (string, error) {
	chat, topic, err := ChatOf(c)
	if err != nil {
		return "", err
	}
	m.Text = nonBlank(m.Text)
	p := &bot.SendMessageParams{ChatID: chat, MessageThreadID: topic, Text: HTML(m.Text), ParseMode: models.ParseModeHTML,
		ReplyMarkup: keyboard(m.Buttons)}
	if err := a.pace.wait(ctx); err != nil {
		return "", err
	}
	msg, err := a.bot.SendMessage(ctx, p)
	if entityError(err) {
		p.Text, p.ParseMode = m.Text, ""
		if err := a.pace.wait(ctx); err != nil {
			return "", err
		}
		msg, err = a.bot.SendMessage(ctx, p)
	}
	if err != nil {
		return "", a.limited(chat, mapErr("sendMessage", err))
	}
	return strconv.Itoa(msg.ID), nil
}

// Edit implements relay.Adapter: editMessageText (without buttons it takes
// the inline keyboard away); "message is not modified" is success, a
// message gone is permanent.
func (a *Adapter) Edit(ctx context.Context, c record.Conversation, id string, m relay.Message) error {
	chat, _, err := ChatOf(c)
	if err != nil {
		return err
	}
	mid, err := strconv.Atoi(id)
	if err != nil {
		return fmt.Errorf("telegram: message id %q: %w", id, relay.ErrPermanent)
	}
	m.Text = nonBlank(m.Text)
	p := &bot.EditMessageTextParams{ChatID: chat, MessageID: mid, Text: HTML(m.Text), ParseMode: models.ParseModeHTML,
		ReplyMarkup: keyboard(m.Buttons)}
	if err := a.pace.wait(ctx); err != nil {
		return err
	}
	_, err = a.bot.EditMessageText(ctx, p)
	if entityError(err) {
		p.Text, p.ParseMode = m.Text, ""
		if err := a.pace.wait(ctx); err != nil {
			return err
		}
		_, err = a.bot.EditMessageText(ctx, p)
	}
	if badRequest(err, "message is not modified") {
		return nil
	}
	return a.limited(chat, mapErr("editMessageText", err))
}

// Delete implements relay.Adapter; a message already gone is success.
func (a *Adapter) Delete(ctx context.Context, c record.Conversation, id string) error {
	chat, _, err := ChatOf(c)
	if err != nil {
		return err
	}
	mid, err := strconv.Atoi(id)
	if err != nil {
		return fmt.Errorf("telegram: message id %q: %w", id, relay.ErrPermanent)
	}
	_, err = a.bot.DeleteMessage(ctx, &bot.DeleteMessageParams{ChatID: chat, MessageID: mid})
	if badRequest(err, "message to delete not found") {
		return nil
	}
	return mapErr("deleteMessage", err)
}

// Status implements relay.Adapter: typing by sendChatAction (a tool's line
// has no place on Telegram: typing too); clearing makes no call, as
// Telegram ends the typing with the bot's next message or after 5 s.
func (a *Adapter) Status(ctx context.Context, c record.Conversation, s relay.Status) error {
	if s.Kind == relay.StatusClear {
		return nil
	}
	chat, topic, err := ChatOf(c)
	if err != nil {
		return err
	}
	_, err = a.bot.SendChatAction(ctx, &bot.SendChatActionParams{ChatID: chat, MessageThreadID: topic, Action: models.ChatActionTyping})
	return mapErr("sendChatAction", err)
}

// limited passes err on, telling the pacer of a 429 in chat first (two
// chats' 429s close together pause every chat: globalWindow).
func (a *Adapter) limited(chat int64, err error) error {
	var rl *relay.RateLimitedError
	if errors.As(err, &rl) && a.pace.limited(chat, rl.RetryAfter) && a.cfg.Logger != nil {
		a.cfg.Logger.Warn("telegram: the bot's global rate limit was hit (two chats answered 429 within a second); no message in any chat until retry_after has passed",
			"retry_after", rl.RetryAfter)
	}
	return err
}

// entityError reports Telegram's refusal of a text's HTML.
func entityError(err error) bool { return badRequest(err, "can't parse entities") }

func badRequest(err error, text string) bool {
	return err != nil && errors.Is(err, bot.ErrorBadRequest) && strings.Contains(err.Error(), text)
}

// mapErr turns the library's errors into the relay's: a 429 into
// *relay.RateLimitedError, a refusal that no retry cures (403: blocked or
// kicked; 400: the chat or message is not there, the request is bad) into
// one wrapping relay.ErrPermanent. The library's errors carry no token.
func mapErr(method string, err error) error {
	if err == nil {
		return nil
	}
	if tm, ok := err.(*bot.TooManyRequestsError); ok {
		return &relay.RateLimitedError{RetryAfter: time.Duration(max(tm.RetryAfter, 1)) * time.Second}
	}
	if errors.Is(err, bot.ErrorForbidden) || errors.Is(err, bot.ErrorBadRequest) {
		return fmt.Errorf("telegram: %s: %v: %w", method, err, relay.ErrPermanent)
	}
	return fmt.Errorf("telegram: %s: %w", method, err)
}

// globalWindow is how close two chats' 429s must come for the adapter to
// take them for the bot's global limit (about 30 messages a second over all
// chats) rather than each chat's own (about 1 a second in a chat, 20 a
// minute in a group): Telegram's 429 does not say which limit it is, but
// one chat over its own limit is refused alone, while the global limit
// refuses whichever chats come next.
const globalWindow = time.Second

// pacer spaces the messages of every chat, at most one per every, and holds
// them all back while a global 429's retry_after runs.
type pacer struct {
	mu    sync.Mutex
	next  time.Time
	every time.Duration
	// pausedTill: the bot's global limit was hit; no message before then.
	pausedTill time.Time
	// The last 429's chat and time.
	lastChat int64
	lastAt   time.Time
}

// wait takes the next slot, or returns a *relay.RateLimitedError for the
// time left of a global pause (set before or while it waited): the relay
// then waits for that chat as for its own 429, and makes the call again
// after checking its lease, where sleeping here could outlast the lease.
func (p *pacer) wait(ctx context.Context) error {
	for {
		p.mu.Lock()
		now := time.Now()
		if now.Before(p.pausedTill) {
			left := p.pausedTill.Sub(now)
			p.mu.Unlock()
			return &relay.RateLimitedError{RetryAfter: left}
		}
		at := p.next
		if at.Before(now) {
			at = now
		}
		p.next = at.Add(p.every)
		p.mu.Unlock()
		if d := time.Until(at); d > 0 {
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			}
		}
		p.mu.Lock()
		paused := time.Now().Before(p.pausedTill)
		p.mu.Unlock()
		if !paused {
			return nil
		}
	}
}

// limited records a 429 of chat: when another chat's came within
// globalWindow, the bot's global limit was hit, and no message goes out
// (in any chat) for retryAfter. It reports whether it paused.
func (p *pacer) limited(chat int64, retryAfter time.Duration) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	global := !p.lastAt.IsZero() && p.lastChat != chat && now.Sub(p.lastAt) < globalWindow
	p.lastChat, p.lastAt = chat, now
	if global {
		if till := now.Add(retryAfter); till.After(p.pausedTill) {
			p.pausedTill = till
		}
	}
	return global
}

// Me is the bot as getMe tells it.
type Me struct {
	ID       int64
	Username string
}

// Me asks Telegram who the bot is (and so checks the token).
func (a *Adapter) Me(ctx context.Context) (Me, error) {
	u, err := a.bot.GetMe(ctx)
	if err != nil {
		return Me{}, mapErr("getMe", err)
	}
	return Me{ID: u.ID, Username: u.Username}, nil
}

// PointInbound sets the bot's inbound up: setWebhook with url and secret, or
// (polling) deleteWebhook, as getUpdates is refused while a webhook is set.
// Pending updates are kept either way.
func (a *Adapter) PointInbound(ctx context.Context, url, secret string, webhook bool) error {
	if webhook {
		_, err := a.bot.SetWebhook(ctx, &bot.SetWebhookParams{URL: url, SecretToken: secret,
			AllowedUpdates: []string{"message", "callback_query"}})
		return mapErr("setWebhook", err)
	}
	_, err := a.bot.DeleteWebhook(ctx, &bot.DeleteWebhookParams{})
	return mapErr("deleteWebhook", err)
}
