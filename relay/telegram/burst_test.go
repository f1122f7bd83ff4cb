package telegram_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/internal/killtest"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// TestTelegramBurstOf50ChatsStaysUnderTheGlobalLimit has 50 chats' answers
// written at once while a relay (the Telegram adapter, the fake Bot API
// enforcing 30 messages a second) runs: every chat shows its answer once,
// no call is refused, and the most messages in any one second stays at 30
// or under. It logs that peak and how long the last chat waited.
func TestTelegramBurstOf50ChatsStaysUnderTheGlobalLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay binary")
	}
	bin := killtest.Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("tgburst%d:", rand.Int64())
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	defer fake.Close()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	client, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: red.Addr}, Replies: replies, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	var logs killtest.Logs
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+red.Addr+"/0", "LETTAQ_KEY_PREFIX="+prefix, "LETTAQ_HTTP_ADDR=off",
		"LETTAQ_TELEGRAM_TOKEN="+telegramfake.Token, "LETTAQ_TELEGRAM_API_URL="+srv.URL,
		"LETTAQ_RELAY_AGENT_ID=agent-00000000-0000-4000-8000-000000000000", "LETTAQ_RELAY_SHARDS=8", "LETTAQ_LOG_FORMAT=text")
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
	if err := fake.Wait(ctx, func(f *telegramfake.Server) bool { return f.Count(0, "deleteWebhook") > 0 }); err != nil {
		t.Fatal("the relay did not start")
	}
	const chats = 50
	start := time.Now()
	for i := 1; i <= chats; i++ {
		ev := record.ReplyEvent{Type: record.EventAnswer, TaskID: fmt.Sprintf("turn%d", i), Otid: "o", RunID: "r", Text: "Done."}
		if _, err := replies.EmitAnswerOnce(ctx, telegram.Conversation(int64(i), 0), ev); err != nil {
			t.Fatal(err)
		}
	}
	written := time.Since(start)
	err = fake.Wait(ctx, func(f *telegramfake.Server) bool { return f.Count(0, "sendMessage") >= chats })
	if err != nil {
		t.Fatalf("%d of %d chats answered\nrelay log:\n%s", fake.Count(0, "sendMessage"), chats, logs.String())
	}
	var sent []time.Time
	refused := 0
	for _, c := range fake.Calls() {
		switch {
		case c.Code == 429:
			refused++
		case c.Method == "sendMessage" || c.Method == "editMessageText":
			sent = append(sent, c.At)
		}
	}
	sort.Slice(sent, func(i, j int) bool { return sent[i].Before(sent[j]) })
	peak := 0
	for i := range sent {
		n := sort.Search(len(sent), func(j int) bool { return !sent[j].Before(sent[i].Add(time.Second)) }) - i
		peak = max(peak, n)
	}
	for i := 1; i <= chats; i++ {
		if n := len(fake.BotMessages(int64(i))); n != 1 {
			t.Errorf("chat %d shows %d messages, want 1", i, n)
		}
	}
	if refused > 0 || peak > 30 {
		t.Errorf("%d calls refused (429), peak %d messages in a second: want 0 and at most 30", refused, peak)
	}
	t.Logf("%d chats answered at once (written in %v): %d messages, peak %d in any second (limit 30), %d refused; the last chat's answer showed %v after the first was written",
		chats, written.Round(time.Millisecond), len(sent), peak, refused, sent[len(sent)-1].Sub(start).Round(time.Millisecond))
}
