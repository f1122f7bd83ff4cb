package telegram_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/split"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

func newAdapter(t *testing.T, r telegramfake.Rules) (*telegramfake.Server, *telegram.Adapter) {
	t.Helper()
	fake := telegramfake.New("", r)
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	a, err := telegram.New(telegram.Config{Token: telegramfake.Token, ServerURL: srv.URL, PerSecond: 1000})
	if err != nil {
		t.Fatal(err)
	}
	return fake, a
}

var _ relay.Adapter = (*telegram.Adapter)(nil)

func TestAdapterSendsHTMLEditsAndDeletes(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	ctx := context.Background()
	c := telegram.Conversation(7, 0)
	id, err := a.Send(ctx, c, relay.Message{Text: "a < b & **bold** `x<y`"})
	if err != nil {
		t.Fatal(err)
	}
	ms := fake.BotMessages(7)
	if len(ms) != 1 || ms[0].Text != "a < b & bold x<y" || ms[0].ParseMode != "HTML" {
		t.Fatalf("chat shows %+v, want the HTML's text", ms)
	}
	// The same text again: Telegram says not modified; the relay sees success.
	if err := a.Edit(ctx, c, id, relay.Message{Text: "a < b & **bold** `x<y`"}); err != nil {
		t.Fatalf("not-modified edit: %v", err)
	}
	if err := a.Edit(ctx, c, id, relay.Message{Text: "longer answer"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Edit(ctx, c, "99", relay.Message{Text: "x"}); !errors.Is(err, relay.ErrPermanent) {
		t.Fatalf("edit of a message gone: %v, want permanent", err)
	}
	if err := a.Delete(ctx, c, id); err != nil {
		t.Fatal(err)
	}
	if err := a.Delete(ctx, c, id); err != nil {
		t.Fatalf("second delete: %v, want success", err)
	}
	if n := len(fake.BotMessages(7)); n != 0 {
		t.Fatalf("%d messages left", n)
	}
	if err := a.Status(ctx, c, relay.Status{Kind: relay.StatusTyping}); err != nil {
		t.Fatal(err)
	}
	if err := a.Status(ctx, c, relay.Status{Kind: relay.StatusClear}); err != nil {
		t.Fatal(err)
	}
	if n := fake.Count(7, "sendChatAction"); n != 1 {
		t.Fatalf("%d chat actions, want 1 (clearing makes no call)", n)
	}
}

func TestAdapterFallsBackToPlainTextWhenEntitiesAreRefused(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	fake.RefuseNext("sendMessage", "Bad Request: can't parse entities: Unsupported start tag \"x\" at byte offset 0")
	if _, err := a.Send(context.Background(), telegram.Conversation(7, 0), relay.Message{Text: "**hi** <x>"}); err != nil {
		t.Fatal(err)
	}
	ms := fake.BotMessages(7)
	if len(ms) != 1 || ms[0].Text != "**hi** <x>" || ms[0].ParseMode != "" {
		t.Fatalf("chat shows %+v, want the plain text", ms)
	}
}

func TestAdapterMapsRateLimitAndBlocked(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	ctx := context.Background()
	c := telegram.Conversation(7, 0)
	fake.RateLimitNext("sendMessage", 3)
	_, err := a.Send(ctx, c, relay.Message{Text: "hi"})
	var rl *relay.RateLimitedError
	if !errors.As(err, &rl) || rl.RetryAfter != 3*time.Second {
		t.Fatalf("429: %v, want RateLimitedError of 3s", err)
	}
	fake.RefuseNext("sendChatAction", "Forbidden: bot was blocked by the user")
	if err := a.Status(ctx, c, relay.Status{Kind: relay.StatusTyping}); !errors.Is(err, relay.ErrPermanent) {
		t.Fatalf("blocked: %v, want permanent", err)
	}
	if strings.Contains(err.Error(), telegramfake.Token) {
		t.Fatal("error holds the token")
	}
}

func TestAdapterApprovalKeyboardGoesAwayWithEdit(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	ctx := context.Background()
	c := telegram.Conversation(-1001, 5)
	id, err := a.Send(ctx, c, relay.Message{Text: "Run it?", Buttons: []relay.Button{{Label: "Approve", Data: "ap:k:y"}, {Label: "Deny", Data: "ap:k:n"}}})
	if err != nil {
		t.Fatal(err)
	}
	ms := fake.BotMessages(-1001)
	if len(ms) != 1 || ms[0].Thread != 5 || len(ms[0].Keyboard) != 1 || len(ms[0].Keyboard[0]) != 2 || ms[0].Keyboard[0][0].CallbackData != "ap:k:y" {
		t.Fatalf("chat shows %+v, want the request in topic 5 with two buttons", ms)
	}
	if err := a.Edit(ctx, c, id, relay.Message{Text: "Run it?\n\n✅ Approved."}); err != nil {
		t.Fatal(err)
	}
	if ms := fake.BotMessages(-1001); ms[0].Keyboard != nil {
		t.Fatalf("keyboard still there: %+v", ms[0].Keyboard)
	}
}

func TestAdapterPartOfTelegramsLimitIsAccepted(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	if a.Limits().PartLimit != 4096 {
		t.Fatalf("part limit %d", a.Limits().PartLimit)
	}
	// A part as the relay cuts it (4096 UTF-16 units, emoji counting 2),
	// with characters HTML escapes: Telegram counts after parsing.
	text := strings.Repeat("😀&<", 1024)
	if len(split.Message(text, 4096)) != 1 {
		t.Fatal("the relay would cut it")
	}
	if _, err := a.Send(context.Background(), telegram.Conversation(7, 0), relay.Message{Text: text}); err != nil {
		t.Fatal(err)
	}
	if ms := fake.BotMessages(7); len(ms) != 1 || ms[0].Text != text {
		t.Fatal("the part was not shown whole")
	}
}

func TestHTMLEscapesAndConvertsMarkdown(t *testing.T) {
	for in, want := range map[string]string{
		"a<b>&c":                 "a&lt;b&gt;&amp;c",
		"**bold** and `c<d`":     "<b>bold</b> and <code>c&lt;d</code>",
		"```go\nx := 1 < 2\n```": `<pre><code class="language-go">x := 1 &lt; 2` + "\n</code></pre>",
		"**unclosed":             "**unclosed",
	} {
		if got := telegram.HTML(in); got != want {
			t.Errorf("HTML(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestAdapterShowsBlankTextAsEllipsis(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{})
	id, err := a.Send(context.Background(), telegram.Conversation(7, 0), relay.Message{Text: "\n"})
	if err != nil {
		t.Fatalf("a growing answer's first line break: %v", err)
	}
	if err := a.Edit(context.Background(), telegram.Conversation(7, 0), id, relay.Message{Text: "\nHello"}); err != nil {
		t.Fatal(err)
	}
	if ms := fake.BotMessages(7); len(ms) != 1 || ms[0].Text != "Hello" {
		t.Fatalf("chat shows %+v", ms)
	}
}
