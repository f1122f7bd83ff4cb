package telegram_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// TestAdapterPausesEveryChatOnlyWhenTwoChatsAre429 tells a chat's own 429
// from the bot's global limit: 429s of one chat leave the other chats
// alone; a second chat's 429 within a second pauses every chat for its
// retry_after, the held-back calls answered as rate limited without
// reaching Telegram, and the calls go out again once it has passed.
func TestAdapterPausesEveryChatOnlyWhenTwoChatsAre429(t *testing.T) {
	fake, a := newAdapter(t, telegramfake.Rules{Global: -1})
	ctx := context.Background()
	send := func(chat int64) error {
		_, err := a.Send(ctx, telegram.Conversation(chat, 0), relay.Message{Text: "hi"})
		return err
	}
	var rl *relay.RateLimitedError
	fake.RateLimitNext("sendMessage", 1)
	if err := send(7); !errors.As(err, &rl) {
		t.Fatalf("chat 7: %v, want 429", err)
	}
	fake.RateLimitNext("sendMessage", 1)
	if err := send(7); !errors.As(err, &rl) {
		t.Fatalf("chat 7 again: %v, want 429", err)
	}
	if err := send(8); err != nil {
		t.Fatalf("chat 8 after chat 7's own 429s: %v, want it sent", err)
	}
	fake.RateLimitNext("editMessageText", 1)
	if err := a.Edit(ctx, telegram.Conversation(8, 0), "1", relay.Message{Text: "hi again"}); !errors.As(err, &rl) {
		t.Fatalf("chat 8's edit: %v, want 429", err)
	}
	paused := time.Now()
	before := len(fake.Calls())
	for _, chat := range []int64{9, 10, 7} {
		err := send(chat)
		if !errors.As(err, &rl) || rl.RetryAfter <= 0 || rl.RetryAfter > time.Second {
			t.Fatalf("chat %d during the global pause: %v, want rate limited for the rest of 1s", chat, err)
		}
	}
	if n := len(fake.Calls()); n != before {
		t.Fatalf("%d calls reached Telegram during the global pause", n-before)
	}
	time.Sleep(time.Until(paused.Add(time.Second + 50*time.Millisecond)))
	if err := send(9); err != nil {
		t.Fatalf("chat 9 after the pause: %v", err)
	}
}

// TestTwoRelaysOverTheGlobalLimitPauseAfterTheirSecond429 runs two
// adapters (two relay replicas, each spacing its messages at 28 a second)
// against a fake Bot API that takes 30 messages a second over all chats:
// together they offer nearly twice that. Each chat's send is made again
// after a 429's retry_after, as the relay does. Every message arrives, and
// after a replica's second 429 (another chat's, within a second) no call
// of that replica reaches Telegram until retry_after has passed. It logs
// how many calls were refused.
func TestTwoRelaysOverTheGlobalLimitPauseAfterTheirSecond429(t *testing.T) {
	if testing.Short() {
		t.Skip("takes a few seconds")
	}
	fake := telegramfake.New("", telegramfake.Rules{Global: 30, RetryAfter: 1})
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	defer fake.Close()
	const perReplica = 45
	base := []int64{1000, 2000}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, b := range base {
		a, err := telegram.New(telegram.Config{Token: telegramfake.Token, ServerURL: srv.URL})
		if err != nil {
			t.Fatal(err)
		}
		for i := range perReplica {
			wg.Add(1)
			go func(chat int64) {
				defer wg.Done()
				for ctx.Err() == nil {
					_, err := a.Send(ctx, telegram.Conversation(chat, 0), relay.Message{Text: "answer"})
					var rl *relay.RateLimitedError
					if !errors.As(err, &rl) {
						if err != nil {
							t.Errorf("chat %d: %v", chat, err)
						}
						return
					}
					select {
					case <-time.After(rl.RetryAfter):
					case <-ctx.Done():
					}
				}
			}(b + int64(i))
		}
	}
	wg.Wait()
	for _, b := range base {
		for i := range perReplica {
			if n := len(fake.BotMessages(b + int64(i))); n != 1 {
				t.Fatalf("chat %d shows %d messages, want 1", b+int64(i), n)
			}
		}
	}
	refused := 0
	for _, b := range base {
		var calls []telegramfake.Call
		for _, c := range fake.Calls() {
			if c.Method == "sendMessage" && c.Chat >= b && c.Chat < b+perReplica {
				calls = append(calls, c)
			}
		}
		sort.Slice(calls, func(i, j int) bool { return calls[i].At.Before(calls[j].At) })
		var last *telegramfake.Call
		for i, c := range calls {
			if c.Code != 429 {
				continue
			}
			refused++
			if last != nil && last.Chat != c.Chat && c.At.Sub(last.At) < time.Second {
				// The replica paused at c: a call in flight then may still
				// land just after it (100 ms of slack), none later within 1s.
				for _, d := range calls[i+1:] {
					if gap := d.At.Sub(c.At); gap > 100*time.Millisecond && gap < 900*time.Millisecond {
						t.Fatalf("replica %d: chat %d called %v after the second 429 (chat %d), inside the 1s pause", b, d.Chat, gap, c.Chat)
					}
				}
				last = nil
				continue
			}
			last = &calls[i]
		}
	}
	t.Logf("%d messages over 2 replicas: %d sendMessage calls refused with 429", 2*perReplica, refused)
}
