package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// DevTelegramAddr is where dev mode's fake Bot API listens (another free
// loopback port when it is taken: the greeting prints the one in use).
const DevTelegramAddr = "127.0.0.1:8284"

// startDevTelegram runs the fake Bot API on loopback and, against it, the
// relay command's own code in this process (runRelayInProcess) with
// LETTAQ_TELEGRAM_TOKEN set to the fake's token (polling, the offset in
// Redis), the bot answering with the demo agent.
func startDevTelegram(ctx context.Context, cfg WorkerSettings, dev *DevEnv, logger *slog.Logger) (*devRelay, error) {
	ln, err := net.Listen("tcp", DevTelegramAddr)
	if err != nil {
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			return nil, fmt.Errorf("dev mode: cannot listen for the fake Bot API: %v", err)
		}
	}
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := &http.Server{Handler: fake.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error("dev mode: the fake Bot API stopped", "err", err)
		}
	}()
	stopFake := func() { fake.Close(); _ = srv.Close() }
	url := "http://" + ln.Addr().String()
	_, stopped, err := runRelayInProcess(ctx, map[string]string{
		"LETTAQ_TELEGRAM_TOKEN":   telegramfake.Token,
		"LETTAQ_TELEGRAM_API_URL": url,
	}, cfg, dev, logger)
	if err != nil {
		stopFake()
		return nil, err
	}
	done := make(chan struct{})
	go func() { <-stopped; stopFake(); close(done) }()
	logger.Info("dev mode: Telegram bot on a fake Bot API", "bot", "@"+telegramfake.BotUsername, "api", url, "agent", DemoAgent)
	return &devRelay{done: done, greet: func(w io.Writer) { greetDevTelegram(w, url) }}, nil
}

// greetDevTelegram tells how to play the user of the fake bot from a
// terminal: what curl posts becomes an update the relay takes by getUpdates,
// as from Telegram; the chat lists what the bot shows.
func greetDevTelegram(w io.Writer, url string) {
	fmt.Fprintf(w, `
Telegram (--relay telegram): the relay runs the bot @%[2]s against a fake Bot API at %[1]s,
answering with the agent %[3]s. Play the user (chat %[4]d) from a terminal:
  curl -s %[1]s%[5]ssend -d text='hello'                 # you write to the bot
  curl -s %[1]s%[5]smessages                             # the chat as you see it: yours and the bot's
  curl -s %[1]s%[5]ssend -d text='[[sim approval=send_email]] mail the team'   # buttons
  curl -s %[1]s%[5]spress -d message_id=N -d data=DATA   # press a button that messages lists
  curl -s %[1]s%[5]ssend -d text=/stop                   # stop the answer being written
Another chat: add -d chat_id=ID (messages?chat_id=ID); a negative id is a group, where the
bot answers only when mentioned (@%[2]s).
`, url, telegramfake.BotUsername, DemoAgent, telegramfake.UserChat, telegramfake.UserPath)
}
