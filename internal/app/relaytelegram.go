package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/envvar"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/telegram"
)

// TelegramSettings configure the relay's Telegram bot (none without a token).
type TelegramSettings struct {
	Token         string
	APIURL        string
	Webhook       bool
	WebhookURL    string
	WebhookSecret string
	Allow         map[int64]bool
	GroupAll      bool
	PartLimit     int
}

// TelegramWebhookPath is where the relay's listener takes Telegram's webhook.
const TelegramWebhookPath = "/telegram/webhook"

var (
	telegramTokenRe  = regexp.MustCompile(`^[0-9]+:[A-Za-z0-9_-]+$`)
	telegramSecretRe = regexp.MustCompile(`^[A-Za-z0-9_-]{1,256}$`)
)

func init() {
	relaySettings = append(relaySettings, telegramSettings...)
}

var telegramSettings = []relaySetting{
	{envvar.Var{Name: "LETTAQ_TELEGRAM_TOKEN", Default: "", Secret: true, Help: "the Telegram bot's token from BotFather (<digits>:<secret>); set: the relay is that bot (integration telegram; needs LETTAQ_RELAY_AGENT_ID, the agent that answers). To try the bot without a token: worker --dev --relay telegram (a fake Bot API). See docs/telegram.md"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && !telegramTokenRe.MatchString(raw) {
				return errors.New("not a bot token: want <digits>:<letters, digits, _ or ->, as BotFather gives it")
			}
			c.Telegram.Token = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_API_URL", Default: telegram.DefaultServerURL, Help: "the Bot API's address (a local Bot API server, or the fake's in tests)"},
		func(c *RelaySettings, raw string) error {
			if !strings.HasPrefix(raw, "http://") && !strings.HasPrefix(raw, "https://") {
				return errors.New("want an http(s) address")
			}
			c.Telegram.APIURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_INBOUND", Default: "polling", Help: "how the bot gets its messages: polling (getUpdates, one replica at a time, offset in Redis; no public address needed) or webhook (Telegram posts to LETTAQ_TELEGRAM_WEBHOOK_URL, which must reach this listener's " + TelegramWebhookPath + ")"},
		func(c *RelaySettings, raw string) error {
			switch raw {
			case "polling", "webhook":
				c.Telegram.Webhook = raw == "webhook"
				return nil
			}
			return errors.New("want polling or webhook")
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_WEBHOOK_URL", Default: "", Help: "webhook: the public https address Telegram posts to, ending in " + TelegramWebhookPath + " (a proxy in front of the listener)"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && !strings.HasPrefix(raw, "https://") && !strings.HasPrefix(raw, "http://") {
				return errors.New("want an https address")
			}
			c.Telegram.WebhookURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_WEBHOOK_SECRET", Default: "", Secret: true, Help: "webhook: the secret Telegram sends in X-Telegram-Bot-Api-Secret-Token (1-256 of A-Z a-z 0-9 _ -); a request without it is refused"},
		func(c *RelaySettings, raw string) error {
			if raw != "" && !telegramSecretRe.MatchString(raw) {
				return errors.New("want 1-256 characters of A-Z, a-z, 0-9, _ and -")
			}
			c.Telegram.WebhookSecret = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_ALLOW", Default: "", Help: "the chat ids the bot answers, comma-separated (a group's is negative); unset: every chat"},
		func(c *RelaySettings, raw string) error {
			c.Telegram.Allow = nil
			for _, item := range strings.Split(raw, ",") {
				if item = strings.TrimSpace(item); item == "" {
					continue
				}
				id, err := strconv.ParseInt(item, 10, 64)
				if err != nil || id == 0 {
					return fmt.Errorf("%q is not a chat id", item)
				}
				if c.Telegram.Allow == nil {
					c.Telegram.Allow = map[int64]bool{}
				}
				c.Telegram.Allow[id] = true
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_GROUPS", Default: "mention", Help: "in groups, take mention (only messages that mention the bot, reply to it or are its commands) or all"},
		func(c *RelaySettings, raw string) error {
			switch raw {
			case "mention", "all":
				c.Telegram.GroupAll = raw == "all"
				return nil
			}
			return errors.New("want mention or all")
		}},
	{envvar.Var{Name: "LETTAQ_TELEGRAM_PART_LIMIT", Default: "4096", Help: "testing only: the longest message the bot sends, in UTF-16 code units (Telegram's limit, 4096, is the most)"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.Telegram.PartLimit, raw, 1, 4096) }},
}

// telegramCheck is the Telegram settings' cross-checks.
func telegramCheck(c RelaySettings) []error {
	t := c.Telegram
	if t.Token == "" {
		return nil
	}
	var errs []error
	if c.AgentID == "" {
		errs = append(errs, errors.New("LETTAQ_TELEGRAM_TOKEN is set and LETTAQ_RELAY_AGENT_ID (--relay-agent-id) is not: the bot needs the agent that answers"))
	}
	if t.Webhook {
		if t.WebhookURL == "" {
			errs = append(errs, errors.New("LETTAQ_TELEGRAM_INBOUND is webhook and LETTAQ_TELEGRAM_WEBHOOK_URL (--telegram-webhook-url) is not set"))
		}
		if t.WebhookSecret == "" {
			errs = append(errs, errors.New("LETTAQ_TELEGRAM_INBOUND is webhook and LETTAQ_TELEGRAM_WEBHOOK_SECRET (--telegram-webhook-secret) is not set"))
		}
		if c.HTTPAddr == "off" {
			errs = append(errs, errors.New("LETTAQ_TELEGRAM_INBOUND is webhook and LETTAQ_HTTP_ADDR is off: the webhook is served by the HTTP listener"))
		}
	}
	return errs
}

// relayTelegram is the bot while the relay runs.
type relayTelegram struct {
	cfg     TelegramSettings
	adapter *telegram.Adapter
	agent   string
	rdb     redis.UniversalClient
	prefix  string
	enqueue telegram.Enqueuer
	log     *slog.Logger
	in      chan *telegram.Inbound // the inbound side, once getMe answered
}

func newRelayTelegram(cfg RelaySettings, rdb redis.UniversalClient, enqueue telegram.Enqueuer, logger *slog.Logger) (*relayTelegram, error) {
	if cfg.Telegram.Token == "" {
		return nil, nil
	}
	a, err := telegram.New(telegram.Config{Token: cfg.Telegram.Token, ServerURL: cfg.Telegram.APIURL, PartLimit: cfg.Telegram.PartLimit, Logger: logger})
	if err != nil {
		return nil, err
	}
	return &relayTelegram{cfg: cfg.Telegram, adapter: a, agent: cfg.AgentID, rdb: rdb, prefix: cfg.KeyPrefix,
		enqueue: enqueue, log: logger, in: make(chan *telegram.Inbound, 1)}, nil
}

// webhook answers Telegram's deliveries once the bot knows itself (503 before).
func (t *relayTelegram) webhook() http.Handler {
	var wh *telegram.Webhook
	ready := make(chan struct{})
	go func() {
		in := <-t.in
		t.in <- in
		wh = &telegram.Webhook{In: in, Secret: t.cfg.WebhookSecret, Logger: t.log}
		close(ready)
	}()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-ready:
			wh.ServeHTTP(w, r)
		default:
			http.Error(w, "starting", http.StatusServiceUnavailable)
		}
	})
}

// run asks Telegram who the bot is (retrying), points the bot's inbound
// where it is configured (setWebhook, or deleteWebhook for polling), then
// polls until ctx ends.
func (t *relayTelegram) run(ctx context.Context, r *relay.Relay) {
	var me telegram.Me
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		var err error
		if me, err = t.adapter.Me(ctx); err == nil {
			break
		}
		t.log.Error("telegram: getMe failed (is LETTAQ_TELEGRAM_TOKEN right?); trying again", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	in := telegram.NewInbound(t.adapter, telegram.InboundConfig{AgentID: t.agent, Enqueue: t.enqueue, Relay: r,
		Allow: t.cfg.Allow, GroupAll: t.cfg.GroupAll, BotUsername: me.Username, BotID: me.ID, Logger: t.log})
	t.in <- in
	mode := "polling"
	if t.cfg.Webhook {
		mode = "webhook"
	}
	t.log.Info("telegram: bot ready", "bot", "@"+me.Username, "inbound", mode)
	for wait := time.Second; ; wait = min(2*wait, time.Minute) {
		err := t.adapter.PointInbound(ctx, t.cfg.WebhookURL, t.cfg.WebhookSecret, t.cfg.Webhook)
		if err == nil {
			break
		}
		t.log.Error("telegram: could not set the inbound up; trying again", "inbound", mode, "err", err, "in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
	if t.cfg.Webhook {
		return
	}
	p := &telegram.Poller{A: t.adapter, In: in, Redis: t.rdb, Key: t.prefix + "relay:telegram:offset", Logger: t.log}
	_ = p.Run(ctx)
}
