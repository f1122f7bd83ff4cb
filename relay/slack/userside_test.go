package slack_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	sg "github.com/slack-go/slack"

	"github.com/lettaq/lettaq/relay"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// TestFakeUserSideSpeaksAsSlack: the fake's user side (what dev mode prints
// for a terminal) makes the fake send the app signed requests as Slack does:
// a mention opens its thread's conversation, a press of a button the app
// posted reaches the relay in that thread, /stop in the DM stops the DM; the
// conversation lists the user's messages and the app's as shown.
func TestFakeUserSideSpeaksAsSlack(t *testing.T) {
	rec := &recorder{}
	f := slackfake.New(slackfake.Options{})
	t.Cleanup(f.Stop)
	srv := httptest.NewServer(http.StripPrefix("/slack", &relayslack.Inbound{SigningSecret: f.SigningSecret(), AgentID: agent,
		Enqueue: rec, Controls: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	post := func(action string, form url.Values) map[string]any {
		t.Helper()
		resp, err := http.PostForm(f.User.URL()+action, form)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got := post("dm", url.Values{"text": {"too early"}}); got["ok"] != false {
		t.Fatalf("a DM before the app is set: %v, want refused", got)
	}
	f.User.SetApp(srv.URL + "/slack/")

	got := post("mention", url.Values{"text": {"what is lettaq?"}})
	ts, _ := got["ts"].(string)
	if got["ok"] != true || got["app_status"] != float64(200) || got["thread"] != ts {
		t.Fatalf("mention: %v", got)
	}
	rec.mu.Lock()
	m := rec.enqueued[0]
	rec.mu.Unlock()
	conv := relayslack.Conversation(slackfake.DevChannel, ts)
	if m.Conversation != conv || m.Text != "what is lettaq?" || m.SenderID != slackfake.DevUser || m.MessageID != slackfake.DevChannel+"/"+ts {
		t.Fatalf("enqueued %+v, want the mention's thread", m)
	}

	// The app answers in the thread with buttons; the user presses one by its value.
	ad := relayslack.New(sg.New(f.Token(), sg.OptionAPIURL(f.APIURL())))
	if _, err := ad.Send(context.Background(), conv, relay.Message{Text: "Run it?", Buttons: []relay.Button{{Label: "Approve", Data: "ap:k:y"}}}); err != nil {
		t.Fatal(err)
	}
	if got := post("press", url.Values{"value": {"ap:nope:y"}}); got["ok"] != false {
		t.Fatalf("a press of no button: %v, want refused", got)
	}
	if got := post("press", url.Values{"value": {"ap:k:y"}}); got["ok"] != true {
		t.Fatalf("press: %v", got)
	}
	shown := f.User.Conversation(slackfake.DevChannel, ts)
	if len(shown) != 2 || shown[0].From != slackfake.DevUser || shown[1].From != "app" || shown[1].Thread != ts || shown[1].Buttons[0].Value != "ap:k:y" {
		t.Fatalf("the thread shows %+v", shown)
	}

	if got := post("command", url.Values{}); got["ok"] != true {
		t.Fatalf("/stop: %v", got)
	}
	rec.mu.Lock()
	defer rec.mu.Unlock()
	if len(rec.presses) != 1 || rec.presses[0] != conv.String()+" ap:k:y by "+slackfake.DevUser {
		t.Errorf("presses %v", rec.presses)
	}
	if len(rec.commands) != 1 || rec.commands[0] != relayslack.Conversation(slackfake.DevDM, "").String()+" /stop by "+slackfake.DevUser {
		t.Errorf("commands %v", rec.commands)
	}
}
