package slack_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	sg "github.com/slack-go/slack"

	"github.com/lettaq/lettaq/relay"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

func newAdapter(t *testing.T, opt slackfake.Options) (*relayslack.Adapter, *slackfake.Fake) {
	t.Helper()
	f := slackfake.New(opt)
	t.Cleanup(f.Stop)
	return relayslack.New(sg.New(f.Token(), sg.OptionAPIURL(f.APIURL()))), f
}

// TestAdapterSendEditDeleteInThread shows, grows and removes a message in a
// thread: the fake holds it under the thread's conversation, with its buttons.
func TestAdapterSendEditDeleteInThread(t *testing.T) {
	ad, f := newAdapter(t, slackfake.Options{})
	ctx := context.Background()
	conv := relayslack.Conversation("C1", "1699999999.000001")
	id, err := ad.Send(ctx, conv, relay.Message{Text: "Hello *there* <b> & co"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ad.Edit(ctx, conv, id, relay.Message{Text: "Hello again"}); err != nil {
		t.Fatal(err)
	}
	// An edit to the same content is success (the relay's idempotent edit).
	if err := ad.Edit(ctx, conv, id, relay.Message{Text: "Hello again"}); err != nil {
		t.Fatal(err)
	}
	req, err := ad.Send(ctx, conv, relay.Message{Text: "🔐 The agent asks to run: rm <x> & y", Buttons: []relay.Button{{Label: "Approve", Data: "ap:k:y"}, {Label: "Deny", Data: "ap:k:n"}}})
	if err != nil {
		t.Fatal(err)
	}
	msgs := f.Platform.Messages(conv)
	if len(msgs) != 2 || msgs[0].Text != "Hello again" || msgs[0].Edits != 2 {
		t.Fatalf("chat shows %+v", msgs)
	}
	if msgs[1].Text != "🔐 The agent asks to run: rm <x> & y" || len(msgs[1].Buttons) != 2 || msgs[1].Buttons[0].Data != "ap:k:y" {
		t.Fatalf("approval request shows %+v", msgs[1])
	}
	if err := ad.Edit(ctx, conv, req, relay.Message{Text: "done"}); err != nil {
		t.Fatal(err)
	}
	if got := f.Platform.Messages(conv)[1]; len(got.Buttons) != 0 {
		t.Fatalf("buttons still shown after the edit: %+v", got)
	}
	if err := ad.Delete(ctx, conv, id); err != nil {
		t.Fatal(err)
	}
	if err := ad.Delete(ctx, conv, id); err != nil {
		t.Fatalf("a second delete: %v, want success", err)
	}
	if err := ad.Edit(ctx, conv, id, relay.Message{Text: "x"}); !errors.Is(err, relay.ErrPermanent) {
		t.Fatalf("edit of a deleted message: %v, want ErrPermanent", err)
	}
	if n := len(f.Platform.Messages(conv)); n != 1 {
		t.Fatalf("%d messages visible, want 1", n)
	}
}

// TestAdapterRateLimitedIsRelayRateLimited: Slack's 429 comes back as the
// relay's RateLimitedError with Slack's Retry-After, and nothing is shown.
func TestAdapterRateLimitedIsRelayRateLimited(t *testing.T) {
	ad, f := newAdapter(t, slackfake.Options{})
	ctx := context.Background()
	conv := relayslack.Conversation("C1", "1.1")
	f.API.RateLimitNext("chat.postMessage", 7)
	_, err := ad.Send(ctx, conv, relay.Message{Text: "hi"})
	var rl *relay.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 7*time.Second {
		t.Fatalf("err %v, want RateLimitedError 7s", err)
	}
	if n := len(f.Platform.Messages(conv)); n != 0 {
		t.Fatalf("%d messages after a 429", n)
	}
}

// TestFakeEnforcesTiers: chat.update beyond its per-minute tier is refused
// with a Retry-After of the seconds until the window has room.
func TestFakeEnforcesTiers(t *testing.T) {
	ad, f := newAdapter(t, slackfake.Options{PerMinute: map[string]int{"chat.update": 3}})
	ctx := context.Background()
	conv := relayslack.Conversation("C1", "1.1")
	id, err := ad.Send(ctx, conv, relay.Message{Text: "a"})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := ad.Edit(ctx, conv, id, relay.Message{Text: strings.Repeat("a", i+2)}); err != nil {
			t.Fatal(err)
		}
	}
	err = ad.Edit(ctx, conv, id, relay.Message{Text: "late"})
	var rl *relay.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter < 50*time.Second || rl.RetryAfter > 60*time.Second {
		t.Fatalf("4th update in a minute: %v, want 429 with Retry-After about 60s", err)
	}
	if ok, limited := f.API.Counts(); ok["chat.update"] != 3 || limited["chat.update"] != 1 {
		t.Fatalf("counts ok %v limited %v", ok, limited)
	}
}

// TestFakeEnforcesSizes: Slack's sizes are refused as Slack refuses them,
// and the adapter makes them permanent (retrying cannot cure them).
func TestFakeEnforcesSizes(t *testing.T) {
	ad, _ := newAdapter(t, slackfake.Options{})
	_, err := ad.Send(context.Background(), relayslack.Conversation("C1", "1.1"), relay.Message{Text: strings.Repeat("x", slackfake.MaxMarkdownText+1)})
	if !errors.Is(err, relay.ErrPermanent) || !strings.Contains(err.Error(), "msg_too_long") {
		t.Fatalf("err %v, want msg_too_long, permanent", err)
	}
}

// TestAdapterStatusInThreadsOnly sets and clears the thread's status; a DM
// outside a thread has none and makes no call.
func TestAdapterStatusInThreadsOnly(t *testing.T) {
	ad, f := newAdapter(t, slackfake.Options{})
	if ttl := ad.Limits().StatusTTL; ttl != 2*time.Minute {
		t.Fatalf("StatusTTL %v, want Slack's 2m (the relay refreshes before it)", ttl)
	}
	ctx := context.Background()
	conv := relayslack.Conversation("C1", "1.1")
	for _, s := range []relay.Status{{Kind: relay.StatusTyping}, {Kind: relay.StatusTool, Text: "web_search"}, {Kind: relay.StatusClear}} {
		if err := ad.Status(ctx, conv, s); err != nil {
			t.Fatal(err)
		}
	}
	if err := ad.Status(ctx, relayslack.Conversation("D1", ""), relay.Status{Kind: relay.StatusTyping}); err != nil {
		t.Fatal(err)
	}
	calls := f.Platform.Calls()
	if len(calls) != 3 || calls[0].Kind != relay.StatusTyping || calls[1].Text != "is running web_search" || calls[2].Kind != relay.StatusClear {
		t.Fatalf("status calls %+v", calls)
	}
}

// TestAdapterBadTokenIsPermanent: the fake refuses another token.
func TestAdapterBadTokenIsPermanent(t *testing.T) {
	f := slackfake.New(slackfake.Options{})
	defer f.Stop()
	ad := relayslack.New(sg.New("xoxb-wrong", sg.OptionAPIURL(f.APIURL())))
	_, err := ad.Send(context.Background(), relayslack.Conversation("C1", "1.1"), relay.Message{Text: "hi"})
	if !errors.Is(err, relay.ErrPermanent) || !strings.Contains(err.Error(), "invalid_auth") || strings.Contains(err.Error(), "xoxb") {
		t.Fatalf("err %v, want invalid_auth, permanent, no token", err)
	}
}

// TestAdapterPacesInsteadOf429: past its pace the adapter makes no call and
// answers a paced RateLimitedError with the wait, so Slack refuses nothing;
// a growing text is put off while a final one still goes.
func TestAdapterPacesInsteadOf429(t *testing.T) {
	ad, f := newAdapter(t, slackfake.Options{})
	ad.SetPace(relayslack.Pace{Update: relayslack.Rate{N: 4, Per: time.Minute}})
	ctx := context.Background()
	conv := relayslack.Conversation("C1", "1.1")
	id, err := ad.Send(ctx, conv, relay.Message{Text: "a", Growing: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := ad.Edit(ctx, conv, id, relay.Message{Text: strings.Repeat("a", i+2), Growing: true}); err != nil {
			t.Fatalf("growing edit %d: %v", i, err)
		}
	}
	var rl *relay.RateLimitedError
	if err := ad.Edit(ctx, conv, id, relay.Message{Text: "aaaa", Growing: true}); !errors.As(err, &rl) || !rl.Paced || rl.RetryAfter <= 0 {
		t.Fatalf("a growing edit past half the pace: %v, want put off", err)
	}
	for _, text := range []string{"final", "final, edited"} {
		if err := ad.Edit(ctx, conv, id, relay.Message{Text: text}); err != nil {
			t.Fatalf("final edit %q: %v", text, err)
		}
	}
	if err := ad.Edit(ctx, conv, id, relay.Message{Text: "one too many"}); !errors.As(err, &rl) || !rl.Paced || rl.RetryAfter < 55*time.Second {
		t.Fatalf("a 5th update in the minute: %v, want put off about a minute", err)
	}
	ok, limited := f.API.Counts()
	if ok["chat.update"] != 4 || len(limited) != 0 {
		t.Fatalf("Slack saw updates ok %v, refused %v; want 4 and none refused", ok, limited)
	}
	if got := f.Platform.Messages(conv); len(got) != 1 || got[0].Text != "final, edited" {
		t.Fatalf("shows %+v", got)
	}
}
