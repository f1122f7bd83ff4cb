package app

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// TestDevRelaySlackDMAnsweredOnce: worker --dev --relay slack prints how to
// write to the app; a DM posted as printed (curl --data-urlencode
// 'text=…' <url>: a form POST) reaches the relay as Slack's signed event,
// becomes a turn of the demo agent, and its answer appears in the fake
// Slack's DM once, as the printed messages command shows it.
func TestDevRelaySlackDMAnsweredOnce(t *testing.T) {
	_, greeting := startDevWorkerWith(t, "--relay=slack")
	dm := regexp.MustCompile(`(?m)^\s*curl -sS --data-urlencode 'text=([^']*)' (http://\S+/user/dm)\s+# a direct message`).FindStringSubmatch(greeting)
	list := regexp.MustCompile(`(?m)^\s*curl -sS (http://\S+/user/messages)\s+# the DM`).FindStringSubmatch(greeting)
	if dm == nil || list == nil {
		t.Fatalf("the greeting does not print how to write a DM and read it:\n%s", greeting)
	}
	text, dmURL, listURL := dm[1], dm[2], list[1]

	resp, err := http.PostForm(dmURL, url.Values{"text": {text}}) // what curl --data-urlencode sends
	if err != nil {
		t.Fatal(err)
	}
	var posted struct {
		OK        bool   `json:"ok"`
		AppStatus int    `json:"app_status"`
		Channel   string `json:"channel"`
		TS        string `json:"ts"`
	}
	err = json.NewDecoder(resp.Body).Decode(&posted)
	resp.Body.Close()
	if err != nil || !posted.OK || posted.AppStatus != http.StatusOK || posted.Channel != slackfake.DevDM {
		t.Fatalf("the DM: %+v (err %v), want the relay's 200 for the DM", posted, err)
	}

	want := "you said: " + text // the demo agent's answer
	read := func() []slackfake.Said {
		resp, err := http.Get(listURL)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []slackfake.Said
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var shown []slackfake.Said
	for {
		shown = read()
		if n := len(shown); n > 0 && shown[n-1].From == "app" && shown[n-1].Text == want {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the answer %q did not appear in the DM; it shows %+v", want, shown)
		case <-time.After(50 * time.Millisecond):
		}
	}
	if len(shown) != 2 || shown[0].From != slackfake.DevUser || shown[0].Text != text || shown[0].TS != posted.TS {
		t.Fatalf("the DM shows %+v, want the user's message then the app's answer, once", shown)
	}
}

// TestDevRelayNeedsDevAndAKnownPlatform: --relay names a platform dev mode
// knows, and a platform's relay only in dev mode.
func TestDevRelayNeedsDevAndAKnownPlatform(t *testing.T) {
	_, err := ParseWorkerSettings([]string{"--dev", "--relay=discord"}, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "--relay") || !strings.Contains(err.Error(), "want one of web, telegram, slack") {
		t.Errorf("--relay=discord: %v, want an error naming the accepted values", err)
	}
	_, err = ParseWorkerSettings([]string{"--relay=slack"}, env(nil), nil)
	if err == nil || !strings.Contains(err.Error(), "only in dev mode") {
		t.Errorf("--relay=slack without --dev: %v, want an error saying it needs dev mode", err)
	}
	if _, err := ParseWorkerSettings([]string{"--relay=web"}, env(nil), nil); err != nil {
		t.Errorf("--relay=web without --dev: %v", err)
	}
}
