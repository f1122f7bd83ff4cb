package app

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// TestDevTelegramAnswersThroughTheFakeBotAPI follows dev mode's greeting for
// --relay telegram: the message posted to the fake Bot API as printed is
// polled by the relay's Telegram adapter, becomes a turn of the demo agent,
// and its answer shows in the chat the printed command lists, once.
func TestDevTelegramAnswersThroughTheFakeBotAPI(t *testing.T) {
	_, greeting := startDevWorkerWith(t, "--relay=telegram")
	send := regexp.MustCompile(`curl -s (http://127\.0\.0\.1:\d+/user/send) -d text='hello'`).FindStringSubmatch(greeting)
	list := regexp.MustCompile(`curl -s (http://127\.0\.0\.1:\d+/user/messages)\s`).FindStringSubmatch(greeting)
	if send == nil || list == nil {
		t.Fatalf("the greeting does not tell how to talk to the fake bot:\n%s", greeting)
	}
	resp, err := http.PostForm(send[1], url.Values{"text": {"hello"}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("posting the user's message as printed: %v %v", resp, err)
	}
	resp.Body.Close()

	var shown []telegramfake.ShownMessage
	deadline := time.Now().Add(30 * time.Second)
	for {
		shown = listChat(t, list[1])
		answers := 0
		for _, m := range shown {
			if m.From == "bot" && strings.Contains(m.Text, "you said: hello") {
				answers++
			}
		}
		if answers == 1 && len(shown) == 2 {
			break
		}
		if answers > 1 || len(shown) > 2 || time.Now().After(deadline) {
			t.Fatalf("want the user's message and the bot's answer once; the chat shows %+v", shown)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if shown[0].From != "user" || shown[0].Text != "hello" {
		t.Fatalf("the chat's first message: %+v", shown[0])
	}
	t.Logf("the chat: %+v", shown)
	// The answer is complete and stays one message: nothing more comes.
	time.Sleep(1500 * time.Millisecond)
	if again := listChat(t, list[1]); len(again) != 2 || again[1].Text != shown[1].Text && !strings.HasPrefix(again[1].Text, shown[1].Text) {
		t.Fatalf("after the answer the chat became %+v (was %+v)", again, shown)
	}
}

func listChat(t *testing.T, u string) []telegramfake.ShownMessage {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []telegramfake.ShownMessage
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDevRelayFlag refuses an unknown relay naming the accepted ones, and a
// relay without dev mode naming the production command.
func TestDevRelayFlag(t *testing.T) {
	_, err := ParseWorkerSettings([]string{"--dev", "--relay=discord"}, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "LETTAQ_RELAY") || !strings.Contains(err.Error(), "--relay") ||
		!strings.Contains(err.Error(), "web, telegram") || !strings.Contains(err.Error(), `"discord"`) {
		t.Fatalf("--relay=discord: %v", err)
	}
	_, err = ParseWorkerSettings([]string{"--relay=telegram"}, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "--dev") || !strings.Contains(err.Error(), "relay command") {
		t.Fatalf("--relay=telegram without --dev: %v", err)
	}
	c, err := ParseWorkerSettings([]string{"--dev"}, env(nil), nil)
	if err != nil || c.Relay != "web" {
		t.Fatalf("default: %q %v", c.Relay, err)
	}
}
