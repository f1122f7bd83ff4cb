package app

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

func TestRelayTelegramConfigErrorsExit2NamingTheVariable(t *testing.T) {
	const token = "123456:AAFakeSecretPart_xyz"
	const agent = "agent-00000000-0000-4000-8000-000000000000"
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": "not a token"}, "LETTAQ_TELEGRAM_TOKEN=(secret): not a bot token"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token}, "LETTAQ_RELAY_AGENT_ID"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_INBOUND": "push"}, "LETTAQ_TELEGRAM_INBOUND"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_INBOUND": "webhook",
			"LETTAQ_TELEGRAM_WEBHOOK_URL": "https://bot.example/telegram/webhook"}, "LETTAQ_TELEGRAM_WEBHOOK_SECRET"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_INBOUND": "webhook",
			"LETTAQ_TELEGRAM_WEBHOOK_SECRET": "s3cret"}, "LETTAQ_TELEGRAM_WEBHOOK_URL"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_WEBHOOK_SECRET": "no spaces allowed"}, "LETTAQ_TELEGRAM_WEBHOOK_SECRET"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_ALLOW": "12,abc"}, "LETTAQ_TELEGRAM_ALLOW"},
		{map[string]string{"LETTAQ_TELEGRAM_TOKEN": token, "LETTAQ_RELAY_AGENT_ID": agent, "LETTAQ_TELEGRAM_GROUPS": "some"}, "LETTAQ_TELEGRAM_GROUPS"},
	} {
		var out, errOut bytes.Buffer
		code := RunRelay(context.Background(), nil, func(k string) string { return tc.env[k] }, &out, &errOut)
		if code != ExitUsage || !strings.Contains(errOut.String(), tc.want) {
			t.Errorf("env %v: exit %d, stderr %q; want exit 2 naming %s", tc.env, code, errOut.String(), tc.want)
		}
		if strings.Contains(errOut.String(), "AAFakeSecretPart") {
			t.Errorf("env %v: the token is in the error: %q", tc.env, errOut.String())
		}
	}
}

func TestRelayTelegramSettingsParse(t *testing.T) {
	env := map[string]string{"LETTAQ_TELEGRAM_TOKEN": "1:abc", "LETTAQ_RELAY_AGENT_ID": "agent-00000000-0000-4000-8000-000000000000",
		"LETTAQ_TELEGRAM_ALLOW": "7, -100123", "LETTAQ_TELEGRAM_GROUPS": "all"}
	c, err := ParseRelaySettings(nil, func(k string) string { return env[k] }, &bytes.Buffer{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Telegram.Token != "1:abc" || !c.Telegram.Allow[7] || !c.Telegram.Allow[-100123] || !c.Telegram.GroupAll || c.Telegram.Webhook ||
		c.Telegram.APIURL != "https://api.telegram.org" {
		t.Fatalf("parsed %+v", c.Telegram)
	}
}

// TestRelayTelegramBotTakesAMessageAndShowsTyping runs the relay as a
// Telegram bot against the fake Bot API: a user's message is polled,
// enqueued as a turn (its accepted event lands in the chat's reply stream),
// and the relay shows typing in that chat.
func TestRelayTelegramBotTakesAMessageAndShowsTyping(t *testing.T) {
	red := testredis.StartPersistent(t)
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	defer fake.Close()
	env := map[string]string{"REDIS_URL": "redis://" + red.Addr + "/0", "LETTAQ_KEY_PREFIX": fmt.Sprintf("tg%d:", rand.Int64()),
		"LETTAQ_HTTP_ADDR": "off", "LETTAQ_TELEGRAM_TOKEN": telegramfake.Token, "LETTAQ_TELEGRAM_API_URL": srv.URL,
		"LETTAQ_RELAY_AGENT_ID": "agent-00000000-0000-4000-8000-000000000000", "LETTAQ_RELAY_LEASE": "1s", "LETTAQ_LOG_FORMAT": "text"}
	ctx, cancel := context.WithCancel(context.Background())
	exit := make(chan int, 1)
	go func() { exit <- RunRelay(ctx, nil, func(k string) string { return env[k] }, io.Discard, io.Discard) }()
	fake.SendText(telegramfake.From{Chat: 7}, "hello")
	wctx, wcancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer wcancel()
	if err := fake.Wait(wctx, func(f *telegramfake.Server) bool { return f.Count(7, "sendChatAction") > 0 }); err != nil {
		t.Fatal("no typing in the chat: the message did not become a turn the relay shows")
	}
	cancel()
	if code := <-exit; code != ExitOK {
		t.Fatalf("relay exited %d", code)
	}
}
