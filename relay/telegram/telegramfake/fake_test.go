package telegramfake_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

func newBot(t *testing.T, r telegramfake.Rules) (*telegramfake.Server, *bot.Bot) {
	t.Helper()
	fake := telegramfake.New("", r)
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	b, err := bot.New(telegramfake.Token, bot.WithServerURL(srv.URL), bot.WithSkipGetMe())
	if err != nil {
		t.Fatal(err)
	}
	return fake, b
}

func TestFakeEnforcesTextRules(t *testing.T) {
	fake, b := newBot(t, telegramfake.Rules{})
	ctx := context.Background()
	// 4096 UTF-16 code units: 2048 emoji fit, one more does not.
	if _, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 7, Text: strings.Repeat("😀", 2048)}); err != nil {
		t.Fatalf("4096 units refused: %v", err)
	}
	_, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 7, Text: strings.Repeat("😀", 2049)})
	if !errors.Is(err, bot.ErrorBadRequest) || !strings.Contains(err.Error(), "message is too long") {
		t.Fatalf("4098 units: %v, want message is too long", err)
	}
	// Tags do not count; a bad tag is refused.
	m, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 7, Text: "<b>" + strings.Repeat("a", 4096) + "</b> ", ParseMode: models.ParseModeHTML})
	if err != nil {
		t.Fatalf("HTML of 4096 shown units: %v", err)
	}
	_, err = b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 7, Text: "a <foo> b", ParseMode: models.ParseModeHTML})
	if err == nil || !strings.Contains(err.Error(), "can't parse entities") {
		t.Fatalf("bad HTML: %v, want can't parse entities", err)
	}
	// The same content again: not modified.
	_, err = b.EditMessageText(ctx, &bot.EditMessageTextParams{ChatID: 7, MessageID: m.ID, Text: "<b>" + strings.Repeat("a", 4096) + "</b> ", ParseMode: models.ParseModeHTML})
	if err == nil || !strings.Contains(err.Error(), "message is not modified") {
		t.Fatalf("same edit: %v, want not modified", err)
	}
	_, err = b.EditMessageText(ctx, &bot.EditMessageTextParams{ChatID: 7, MessageID: 99, Text: "x"})
	if err == nil || !strings.Contains(err.Error(), "message to edit not found") {
		t.Fatalf("edit of no message: %v", err)
	}
	// callback_data over 64 bytes.
	kb := &models.InlineKeyboardMarkup{InlineKeyboard: [][]models.InlineKeyboardButton{{{Text: "x", CallbackData: strings.Repeat("d", 65)}}}}
	if _, err = b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 7, Text: "k", ReplyMarkup: kb}); err == nil || !strings.Contains(err.Error(), "BUTTON_DATA_INVALID") {
		t.Fatalf("65-byte callback_data: %v", err)
	}
	if n := fake.Count(7, "sendMessage"); n != 2 {
		t.Fatalf("%d messages counted in chat 7, want 2", n)
	}
}

func TestFakeRateLimitsWithRetryAfter(t *testing.T) {
	fake, b := newBot(t, telegramfake.Rules{PerChat: 2, PerChatWindow: time.Hour, RetryAfter: 3})
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if _, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 1, Text: "hi"}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 1, Text: "hi"})
	var tm *bot.TooManyRequestsError
	if !errors.As(err, &tm) || tm.RetryAfter != 3 {
		t.Fatalf("third message: %v, want 429 with retry_after 3", err)
	}
	if _, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: 2, Text: "hi"}); err != nil {
		t.Fatalf("another chat is not limited: %v", err)
	}
	fake.RateLimitNext("sendChatAction", 5)
	if _, err := b.SendChatAction(ctx, &bot.SendChatActionParams{ChatID: 2, Action: models.ChatActionTyping}); !bot.IsTooManyRequestsError(err) {
		t.Fatalf("RateLimitNext: %v", err)
	}
}

func TestFakeGlobalLimitIs30PerSecond(t *testing.T) {
	_, b := newBot(t, telegramfake.Rules{})
	ctx := context.Background()
	var limited int
	for i := 0; i < 31; i++ {
		if _, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: int64(i + 1), Text: "hi"}); bot.IsTooManyRequestsError(err) {
			limited++
		}
	}
	// 31 sends: unless the machine took over a second for them, the 31st is refused.
	if limited > 1 {
		t.Fatalf("%d of 31 refused, want at most 1", limited)
	}
}

func TestFakeDeliversUpdatesToWebhookWithSecret(t *testing.T) {
	fake, b := newBot(t, telegramfake.Rules{})
	ctx := context.Background()
	fake.SendText(telegramfake.From{Chat: 5}, "one")
	fake.SendText(telegramfake.From{Chat: 5}, "two")
	if fake.Pending() != 2 {
		t.Fatalf("pending %d", fake.Pending())
	}
	got := make(chan string, 4)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.Header.Get("X-Telegram-Bot-Api-Secret-Token") != "s3cret" {
			w.WriteHeader(http.StatusForbidden)
			return
		}
		got <- string(body)
	}))
	defer hook.Close()
	if _, err := b.SetWebhook(ctx, &bot.SetWebhookParams{URL: hook.URL, SecretToken: "s3cret"}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"text":"one"`, `"text":"two"`} {
		select {
		case body := <-got:
			if !strings.Contains(body, want) {
				t.Fatalf("webhook got %s, want %s", body, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("no webhook delivery")
		}
	}
}

func TestFakeTakesMethodsWithoutParameters(t *testing.T) {
	_, b := newBot(t, telegramfake.Rules{})
	me, err := b.GetMe(context.Background())
	if err != nil || me.Username != telegramfake.BotUsername {
		t.Fatalf("getMe: %v %v", me, err)
	}
	if _, err := b.DeleteWebhook(context.Background(), &bot.DeleteWebhookParams{}); err != nil {
		t.Fatal(err)
	}
}
