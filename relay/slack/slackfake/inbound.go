package slackfake

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// Sign returns Slack's signature headers for body sent at t: X-Slack-Signature
// is "v0=" + hex HMAC-SHA256(secret, "v0:<timestamp>:<body>").
func Sign(secret string, t time.Time, body []byte) http.Header {
	ts := strconv.FormatInt(t.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "v0:%s:", ts)
	mac.Write(body)
	h := http.Header{}
	h.Set("X-Slack-Request-Timestamp", ts)
	h.Set("X-Slack-Signature", "v0="+hex.EncodeToString(mac.Sum(nil)))
	return h
}

// Inbound sends signed requests to an app's endpoints, as Slack does.
type Inbound struct {
	Secret string
	// Now is the signing time (default time.Now): an old one tests the
	// app's replay check.
	Now  func() time.Time
	HTTP *http.Client
}

// Inbound returns the sender of requests signed with the fake's secret.
func (f *Fake) Inbound() *Inbound { return &Inbound{Secret: f.opt.SigningSecret} }

// Post sends body with contentType to url, signed; extra headers (Slack's
// X-Slack-Retry-Num on a redelivery) are added.
func (in *Inbound) Post(to, contentType string, body []byte, extra http.Header) (*http.Response, error) {
	now := time.Now
	if in.Now != nil {
		now = in.Now
	}
	req, err := http.NewRequest(http.MethodPost, to, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	for k, v := range Sign(in.Secret, now(), body) {
		req.Header[k] = v
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	req.Header.Set("Content-Type", contentType)
	hc := in.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	return hc.Do(req)
}

// Event sends an Events API event_callback wrapping event (an app_mention or
// message event as Slack sends it), with event id eventID; retry > 0 marks a
// redelivery (X-Slack-Retry-Num).
func (in *Inbound) Event(to, eventID string, event map[string]any, retry int) (*http.Response, error) {
	body, _ := json.Marshal(map[string]any{
		"token": "unused", "team_id": "T0FAKE", "api_app_id": "A0FAKE", "type": "event_callback",
		"event_id": eventID, "event_time": time.Now().Unix(), "event": event,
	})
	var extra http.Header
	if retry > 0 {
		extra = http.Header{"X-Slack-Retry-Num": {strconv.Itoa(retry)}, "X-Slack-Retry-Reason": {"http_timeout"}}
	}
	return in.Post(to, "application/json", body, extra)
}

// URLVerification sends the challenge Slack sends when the request URL is set.
func (in *Inbound) URLVerification(to, challenge string) (*http.Response, error) {
	body, _ := json.Marshal(map[string]any{"token": "unused", "type": "url_verification", "challenge": challenge})
	return in.Post(to, "application/json", body, nil)
}

// Press sends a block_actions interaction: user pressed the button with
// value in the message ts of channel (in thread threadTS, "" for none).
func (in *Inbound) Press(to, channel, threadTS, ts, user, value string) (*http.Response, error) {
	payload, _ := json.Marshal(map[string]any{
		"type": "block_actions", "user": map[string]any{"id": user}, "team": map[string]any{"id": "T0FAKE"},
		"channel":   map[string]any{"id": channel},
		"container": map[string]any{"type": "message", "message_ts": ts, "channel_id": channel, "thread_ts": threadTS},
		"message":   map[string]any{"ts": ts, "thread_ts": threadTS},
		"actions":   []map[string]any{{"type": "button", "block_id": "relay_buttons", "action_id": "relay_0", "value": value, "action_ts": "1.0"}},
	})
	return in.Post(to, "application/x-www-form-urlencoded", []byte(url.Values{"payload": {string(payload)}}.Encode()), nil)
}

// Command sends a slash command (e.g. /stop) typed by user in channel.
func (in *Inbound) Command(to, command, text, channel, user string) (*http.Response, error) {
	form := url.Values{"command": {command}, "text": {text}, "channel_id": {channel}, "user_id": {user}, "team_id": {"T0FAKE"}}
	return in.Post(to, "application/x-www-form-urlencoded", []byte(form.Encode()), nil)
}
