package telegram

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Enqueuer makes a message a turn (queue.Client).
type Enqueuer interface {
	Enqueue(ctx context.Context, m queue.Message) (queue.EnqueueResult, error)
}

// Commands runs a chat's /stop and its buttons (*relay.Relay).
type Commands interface {
	Command(ctx context.Context, c record.Conversation, text, sender string) (queue.CancelResult, error)
	Press(ctx context.Context, c record.Conversation, data, sender string) (queue.EnqueueResult, error)
}

// InboundConfig configures Inbound.
type InboundConfig struct {
	// AgentID answers every chat. Required.
	AgentID string
	Enqueue Enqueuer
	Relay   Commands
	// Allow, when not empty, is the chats the bot answers (others are
	// ignored, logged at debug).
	Allow map[int64]bool
	// GroupAll makes the bot take every message in a group; by default it
	// takes only those that mention it (@username), reply to it, or are its
	// commands.
	GroupAll bool
	// BotUsername and BotID are the bot's own (getMe): to see a mention or a
	// reply to it.
	BotUsername string
	BotID       int64
	Logger      *slog.Logger
}

// Inbound turns Telegram updates into lettaq messages, /stop and button
// presses. Handle is idempotent per update: a redelivered update makes the
// same task (its message id), the same cancel, the same answer.
type Inbound struct {
	cfg InboundConfig
	a   *Adapter
	log *slog.Logger
}

// NewInbound returns the inbound side of a.
func NewInbound(a *Adapter, cfg InboundConfig) *Inbound {
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Inbound{cfg: cfg, a: a, log: cfg.Logger}
}

// Handle takes one update. An error means it was not taken (Redis or
// Telegram unreachable): the caller gets it again (polling does not move
// its offset; a webhook answers 500, and Telegram redelivers).
func (in *Inbound) Handle(ctx context.Context, u *models.Update) error {
	switch {
	case u.CallbackQuery != nil:
		return in.press(ctx, u.CallbackQuery)
	case u.Message != nil:
		return in.message(ctx, u.Message)
	}
	return nil // edits, reactions, channel posts: not a turn
}

func (in *Inbound) allowed(chat int64) bool {
	return len(in.cfg.Allow) == 0 || in.cfg.Allow[chat]
}

func sender(u *models.User) string {
	if u == nil {
		return "telegram"
	}
	return "telegram:" + strconv.FormatInt(u.ID, 10)
}

func topicOf(m *models.Message) int {
	if m.IsTopicMessage || m.Chat.IsForum {
		return m.MessageThreadID
	}
	return 0
}

func (in *Inbound) message(ctx context.Context, m *models.Message) error {
	if !in.allowed(m.Chat.ID) {
		in.log.Debug("telegram: message from a chat not allowed; ignored", "chat", m.Chat.ID)
		return nil
	}
	if m.From != nil && m.From.IsBot {
		return nil
	}
	c := Conversation(m.Chat.ID, topicOf(m))
	text := m.Text
	entities := m.Entities
	if text == "" {
		text, entities = m.Caption, m.CaptionEntities
	}
	group := m.Chat.Type == models.ChatTypeGroup || m.Chat.Type == models.ChatTypeSupergroup
	cmd := command(text, entities, in.cfg.BotUsername)
	if group && !in.cfg.GroupAll && cmd == "" && !in.addressed(m, text, entities) {
		return nil
	}
	if cmd == "/stop" || cmd == "/cancel" {
		return in.stop(ctx, c, m)
	}
	text = strings.TrimSpace(strings.ReplaceAll(text, "@"+in.cfg.BotUsername, ""))
	msg := queue.Message{AgentID: in.cfg.AgentID, Text: text, SenderID: sender(m.From), Conversation: c,
		MessageID: strconv.Itoa(m.ID)}
	if len(m.Photo) > 0 {
		img, err := in.photo(ctx, m.Photo)
		if err != nil {
			return err
		}
		if img != nil {
			msg.Images = []queue.Image{*img}
		}
	}
	if err := msg.Validate(); err != nil {
		in.log.Warn("telegram: message refused", "chat", c.String(), "message_id", m.ID, "err", err)
		return nil // no retry makes it valid
	}
	res, err := in.cfg.Enqueue.Enqueue(ctx, msg)
	if err != nil {
		return err
	}
	in.log.Info("telegram: message enqueued", "chat", c.String(), "message_id", m.ID, "task_id", res.TaskID, "duplicate", res.Duplicate)
	return nil
}

// command is the bot command text starts with ("/stop"), "" when none or
// when it is addressed to another bot ("/stop@other_bot").
func command(text string, es []models.MessageEntity, me string) string {
	for _, e := range es {
		if e.Type != models.MessageEntityTypeBotCommand || e.Offset != 0 {
			continue
		}
		fields := strings.Fields(text)
		if len(fields) == 0 {
			return ""
		}
		word := fields[0]
		name, to, addressed := strings.Cut(word, "@")
		if addressed && !strings.EqualFold(to, me) {
			return ""
		}
		return strings.ToLower(name)
	}
	return ""
}

// addressed reports whether a group message is for the bot: it mentions
// it, or replies to one of its messages.
func (in *Inbound) addressed(m *models.Message, text string, es []models.MessageEntity) bool {
	if r := m.ReplyToMessage; r != nil && r.From != nil && (r.From.ID == in.cfg.BotID && in.cfg.BotID != 0 ||
		in.cfg.BotUsername != "" && strings.EqualFold(r.From.Username, in.cfg.BotUsername)) {
		return true
	}
	for _, e := range es {
		if e.Type == models.MessageEntityTypeTextMention && e.User != nil && e.User.ID == in.cfg.BotID {
			return true
		}
	}
	return in.cfg.BotUsername != "" && strings.Contains(strings.ToLower(text), "@"+strings.ToLower(in.cfg.BotUsername))
}

func (in *Inbound) stop(ctx context.Context, c record.Conversation, m *models.Message) error {
	_, err := in.cfg.Relay.Command(ctx, c, "/stop", sender(m.From))
	if errors.Is(err, queue.ErrNotFound) {
		chat, topic, _ := ChatOf(c)
		_, serr := in.a.bot.SendMessage(ctx, &bot.SendMessageParams{ChatID: chat, MessageThreadID: topic, Text: "Nothing to stop.",
			ReplyParameters: &models.ReplyParameters{MessageID: m.ID, AllowSendingWithoutReply: true}})
		if serr != nil {
			in.log.Warn("telegram: could not say nothing runs", "chat", c.String(), "err", mapErr("sendMessage", serr))
		}
		return nil
	}
	if err != nil {
		return err
	}
	in.log.Info("telegram: /stop", "chat", c.String(), "message_id", m.ID)
	return nil
}

// press answers a button: the relay's Press, then answerCallbackQuery (the
// client's spinner stops; the relay's edit took the keyboard away).
func (in *Inbound) press(ctx context.Context, q *models.CallbackQuery) error {
	if q.Message.Message == nil {
		return in.answer(ctx, q.ID, "This message is too old.")
	}
	m := q.Message.Message
	if !in.allowed(m.Chat.ID) {
		return in.answer(ctx, q.ID, "")
	}
	c := Conversation(m.Chat.ID, topicOf(m))
	res, err := in.cfg.Relay.Press(ctx, c, q.Data, sender(&q.From))
	switch {
	case errors.Is(err, queue.ErrNoApproval):
		return in.answer(ctx, q.ID, "This request is no longer open.")
	case err != nil && strings.Contains(err.Error(), "not a button of the relay"):
		return in.answer(ctx, q.ID, "")
	case err != nil:
		return err
	case res.Duplicate:
		return in.answer(ctx, q.ID, "Already answered.")
	}
	in.log.Info("telegram: approval answered", "chat", c.String(), "task_id", res.TaskID)
	return in.answer(ctx, q.ID, "")
}

func (in *Inbound) answer(ctx context.Context, id, text string) error {
	_, err := in.a.bot.AnswerCallbackQuery(ctx, &bot.AnswerCallbackQueryParams{CallbackQueryID: id, Text: text})
	if err != nil {
		// A query answered once, or too old: the press itself is taken.
		in.log.Warn("telegram: answerCallbackQuery", "err", mapErr("answerCallbackQuery", err))
	}
	return nil
}

// photo downloads the largest size of a photo that fits lettaq's image
// limit, as base64 (the file's URL holds the bot token: it never leaves the
// relay). nil: none fits.
func (in *Inbound) photo(ctx context.Context, sizes []models.PhotoSize) (*queue.Image, error) {
	var best *models.PhotoSize
	for i := range sizes {
		s := &sizes[i]
		if s.FileSize <= queue.MaxImageBytes && (best == nil || s.Width*s.Height > best.Width*best.Height) {
			best = s
		}
	}
	if best == nil {
		return nil, nil
	}
	f, err := in.a.bot.GetFile(ctx, &bot.GetFileParams{FileID: best.FileID})
	if err != nil {
		return nil, mapErr("getFile", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.a.bot.FileDownloadLink(f), nil)
	if err != nil {
		return nil, errors.New("telegram: photo: bad file path")
	}
	resp, err := in.a.cfg.HTTPClient.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL holds the token
		}
		return nil, fmt.Errorf("telegram: download photo: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("telegram: download photo: status %d", resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, queue.MaxImageBytes+1))
	if err != nil {
		return nil, fmt.Errorf("telegram: download photo: %v", err)
	}
	if len(b) > queue.MaxImageBytes {
		return nil, nil
	}
	return &queue.Image{MediaType: "image/jpeg", Data: base64.StdEncoding.EncodeToString(b)}, nil
}
