package telegramfake_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// TestFakeUserSideOverHTTP plays the user as a terminal would (curl): a
// posted text becomes an update the bot gets, the chat lists the user's and
// the bot's messages with their buttons, a press becomes a callback query,
// and bad requests are refused naming what is wrong.
func TestFakeUserSideOverHTTP(t *testing.T) {
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	defer fake.Close()
	b, err := bot.New(telegramfake.Token, bot.WithServerURL(srv.URL), bot.WithSkipGetMe())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	resp, err := http.PostForm(srv.URL+telegramfake.UserPath+"send", url.Values{"text": {"hello"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("send: %v %v", resp, err)
	}
	var sent struct{ UpdateID, MessageID, ChatID int64 }
	_ = json.NewDecoder(resp.Body).Decode(&struct {
		U *int64 `json:"update_id"`
		M *int64 `json:"message_id"`
		C *int64 `json:"chat_id"`
	}{&sent.UpdateID, &sent.MessageID, &sent.ChatID})
	resp.Body.Close()
	if sent.ChatID != telegramfake.UserChat || sent.MessageID != 1 {
		t.Fatalf("send answered %+v", sent)
	}
	ups, err := getUpdates(srv.URL, 0)
	if err != nil || len(ups) != 1 || ups[0].Message == nil || ups[0].Message.Text != "hello" || ups[0].Message.Chat.ID != telegramfake.UserChat {
		t.Fatalf("getUpdates: %+v %v", ups, err)
	}

	kb := &models.InlineKeyboardMarkup{InlineKeyboard: [][]models.InlineKeyboardButton{{{Text: "Approve", CallbackData: "a:1"}}}}
	m, err := b.SendMessage(ctx, &bot.SendMessageParams{ChatID: telegramfake.UserChat, Text: "May I?", ReplyMarkup: kb})
	if err != nil {
		t.Fatal(err)
	}
	var shown []telegramfake.ShownMessage
	resp, err = http.Get(srv.URL + telegramfake.UserPath + "messages?chat_id=42")
	if err != nil {
		t.Fatal(err)
	}
	_ = json.NewDecoder(resp.Body).Decode(&shown)
	resp.Body.Close()
	if len(shown) != 2 || shown[0].From != "user" || shown[0].Text != "hello" || shown[1].From != "bot" || shown[1].Text != "May I?" ||
		len(shown[1].Buttons) != 1 || shown[1].Buttons[0].Data != "a:1" {
		t.Fatalf("messages: %+v", shown)
	}

	resp, err = http.PostForm(srv.URL+telegramfake.UserPath+"press", url.Values{"message_id": {"2"}, "data": {"a:1"}})
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("press: %v %v", resp, err)
	}
	resp.Body.Close()
	ups, err = getUpdates(srv.URL, ups[0].ID+1)
	if err != nil || len(ups) != 1 || ups[0].CallbackQuery == nil || ups[0].CallbackQuery.Data != "a:1" || ups[0].CallbackQuery.Message.Message.ID != m.ID {
		t.Fatalf("press as an update: %+v %v", ups, err)
	}

	for _, bad := range []struct{ path, body, want string }{
		{"send", "chat_id=x&text=hi", `chat_id "x"`},
		{"send", "text=%20", "text is empty"},
		{"press", "message_id=2", "want message_id"},
	} {
		resp, err := http.Post(srv.URL+telegramfake.UserPath+bad.path, "application/x-www-form-urlencoded", strings.NewReader(bad.body))
		if err != nil {
			t.Fatal(err)
		}
		msg, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 400 || !strings.Contains(string(msg), bad.want) {
			t.Errorf("%s %s: %d %q, want 400 naming %q", bad.path, bad.body, resp.StatusCode, msg, bad.want)
		}
	}
}

// getUpdates asks the fake for the updates from offset on, as a bot polls.
func getUpdates(base string, offset int64) ([]models.Update, error) {
	resp, err := http.Get(fmt.Sprintf("%s/bot%s/getUpdates?offset=%d", base, telegramfake.Token, offset))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var out struct {
		OK     bool            `json:"ok"`
		Result []models.Update `json:"result"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || !out.OK {
		return nil, fmt.Errorf("getUpdates: ok %v, %v", out.OK, err)
	}
	return out.Result, nil
}
