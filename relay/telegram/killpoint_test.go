package telegram_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/internal/killtest"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

// telegramKillScenarios are the kill-point scenarios run against the
// Telegram adapter: a quick answer, an answer streamed over three parts, an
// approval (a subset of killScenarios, to keep the run short: the relay's
// logic is the same for all adapters; what differs is Telegram's).
func telegramKillScenarios() []killtest.Scenario {
	var out []killtest.Scenario
	for _, sc := range killtest.Scenarios() {
		switch sc.Name {
		case "quick", "streamed-parts", "approval":
			out = append(out, sc)
		}
	}
	return out
}

// TestKillAtEveryStepShowsEachTelegramMessageOnce is
// TestKillAtEveryStepShowsEachMessageOnce with the relay process driving the
// Telegram adapter against the fake Bot API server: every scenario ends
// showing exactly its messages, each sent once, but for a kill in the window
// (after Telegram's accept, before the id's save).
func TestKillAtEveryStepShowsEachTelegramMessageOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the relay binary many times")
	}
	bin := killtest.Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	var windows, runs, kills int
	for _, sc := range telegramKillScenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			var killedAt []string
			for _, step := range relay.Steps {
				for n := 1; n <= 8; n++ {
					at := fmt.Sprintf("%s#%d", step, n)
					res := telegramKillRun(t, bin, red.Addr, rdb, sc, at, nil)
					runs++
					if res.dup {
						windows++
						at += " (window)"
					}
					if !res.reached {
						break
					}
					kills++
					killedAt = append(killedAt, at)
				}
			}
			t.Logf("%s: killed at %d points, each then showing %d message(s), each sent once but in the window: %s",
				sc.Name, len(killedAt), len(sc.Want), strings.Join(killedAt, ", "))
		})
	}
	t.Logf("%d runs, %d kills; %d landed in the window (a message sent twice); 0 lost, 0 other duplicates", runs, kills, windows)
}

// TestTelegramCallsPerAnsweredTurn counts the Bot API calls one answered
// turn costs, without kills: a quick answer, a 2,000-character answer
// streamed in 50 deltas over 2 s (at the default edit pace of 1 s), an
// approval.
func TestTelegramCallsPerAnsweredTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay binary")
	}
	bin := killtest.Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	e := func(typ record.EventType, f func(*record.ReplyEvent)) record.ReplyEvent {
		ev := record.ReplyEvent{Type: typ, TaskID: "turn1", Otid: "otid1", RunID: "run1"}
		if f != nil {
			f(&ev)
		}
		return ev
	}
	long := strings.Repeat("Forty characters of a streamed answer.. ", 50)
	stream := []record.ReplyEvent{e(record.EventAccepted, nil), e(record.EventPhase, func(ev *record.ReplyEvent) { ev.Phase = record.PhaseStreaming })}
	for i := 0; i < len(long); i += 40 {
		stream = append(stream, e(record.EventAnswerDelta, func(ev *record.ReplyEvent) { ev.Text = long[i : i+40] }))
	}
	stream = append(stream, e(record.EventAnswer, func(ev *record.ReplyEvent) { ev.Text = long }))
	scs := []killtest.Scenario{{Name: "streamed-2000", Events: stream, Want: []string{strings.TrimSpace(long)}}}
	for _, sc := range killtest.Scenarios() {
		if sc.Name == "quick" || sc.Name == "approval" {
			scs = append(scs, sc)
		}
	}
	for _, sc := range scs {
		res := telegramKillRun(t, bin, red.Addr, rdb, sc, "", []string{"LETTAQ_RELAY_EDIT_EVERY=1s", "LETTAQ_TELEGRAM_PART_LIMIT=4096"})
		t.Logf("%s: %d message(s) shown; %d Bot API calls: %v", sc.Name, len(sc.Want), res.total, res.calls)
	}
}

type telegramKillResult struct {
	reached, dup bool
	calls        map[string]int
	total        int
}

// telegramKillRun is killRun against the Telegram adapter and the fake
// Bot API server (step "": no kill); extra overrides the relay's settings.
func telegramKillRun(t *testing.T, bin, addr string, rdb *redis.Client, sc killtest.Scenario, step string, extra []string) (res telegramKillResult) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("tgkill%d:", rand.Int64())
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := httptest.NewServer(fake.Handler())
	defer srv.Close()
	defer fake.Close()
	const chat = 4242
	conv := telegram.Conversation(chat, 0)

	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	client, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: addr}, Replies: replies, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	env := append([]string{"REDIS_URL=redis://" + addr + "/0", "LETTAQ_KEY_PREFIX=" + prefix, "LETTAQ_HTTP_ADDR=off",
		"LETTAQ_TELEGRAM_TOKEN=" + telegramfake.Token, "LETTAQ_TELEGRAM_API_URL=" + srv.URL,
		"LETTAQ_RELAY_AGENT_ID=agent-00000000-0000-4000-8000-000000000000",
		"LETTAQ_TELEGRAM_PART_LIMIT=" + fmt.Sprint(killtest.PartLimit), "LETTAQ_RELAY_LEASE=1s",
		"LETTAQ_RELAY_EDIT_EVERY=100ms", "LETTAQ_RELAY_SHARDS=4", "LETTAQ_LOG_LEVEL=info", "LETTAQ_LOG_FORMAT=text"}, extra...)
	var logs killtest.Logs
	start := func(extra ...string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(append(os.Environ(), env...), extra...)
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	killed := start("LETTAQ_RELAY_KILL_AT=" + step)
	exited := make(chan error, 1)
	go func() { exited <- killed.Wait() }()
	go func() {
		// Once the relay is up (it has set its inbound up), as a worker
		// would write while it runs.
		if fake.Wait(ctx, func(f *telegramfake.Server) bool { return f.Count(0, "deleteWebhook") > 0 }) != nil {
			return
		}
		for _, ev := range sc.Events {
			var err error
			switch {
			case ev.Type == record.EventNotify:
				_, err = client.Notify(ctx, queue.Notice{Chat: conv, Text: ev.Text, Key: strings.TrimPrefix(ev.TaskID, queue.NotifyTaskPrefix)})
			case ev.Type.Final():
				_, err = replies.EmitAnswerOnce(ctx, conv, ev)
			default:
				_, err = replies.Emit(ctx, conv, ev)
			}
			if ctx.Err() != nil {
				return // the chat showed the answer before its last events: the case is over
			}
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	window := strings.HasPrefix(step, "send.after#")
	bot := func() []telegramfake.Msg { return fake.BotMessages(chat) }
	done := func(*telegramfake.Server) bool {
		return tgShows(bot(), sc.Want) || window && tgShowsWithOrphan(bot(), sc.Want)
	}
	shown := make(chan struct{})
	go func() {
		if fake.Wait(ctx, done) == nil {
			close(shown)
		}
	}()
	select {
	case err := <-exited:
		if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: relay exited with %v, want SIGKILL\nrelay log:\n%s", step, err, logs.String())
		}
		res.reached = true
	case <-killtest.Settled(ctx, rdb, prefix, conv, shown):
		_ = killed.Process.Signal(syscall.SIGTERM)
		var ws syscall.WaitStatus
		if ee, ok := (<-exited).(*exec.ExitError); ok {
			ws, _ = ee.Sys().(syscall.WaitStatus)
		}
		res.reached = ws.Signaled() && ws.Signal() == syscall.SIGKILL
	case <-ctx.Done():
		_ = killed.Process.Kill()
		<-exited
		t.Fatalf("%s: neither killed nor shown: the chat shows %q, want %q\nrelay log:\n%s", step, tgTexts(bot()), sc.Want, logs.String())
	}
	if res.reached {
		second := start()
		var err error
		shown2 := make(chan struct{})
		go func() {
			if fake.Wait(ctx, done) == nil {
				close(shown2)
			}
		}()
		select {
		case <-killtest.Settled(ctx, rdb, prefix, conv, shown2):
		case <-ctx.Done():
			err = ctx.Err()
		}
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
		if err != nil {
			t.Fatalf("%s: the answer was lost: the chat shows %q, want %q\nrelay log:\n%s", step, tgTexts(bot()), sc.Want, logs.String())
		}
	}
	sends := fake.Count(chat, "sendMessage")
	visible := bot()
	switch {
	case sends == len(sc.Want) && len(visible) == len(sc.Want):
	case window && sends == len(sc.Want)+1 && tgShowsWithOrphan(visible, sc.Want):
		res.dup = true
	default:
		t.Errorf("%s: %d sends, chat shows %q, want %d messages %q, each sent once", step, sends, tgTexts(visible), len(sc.Want), sc.Want)
	}
	res.calls = map[string]int{}
	for _, c := range fake.Calls() {
		if c.Method != "getUpdates" && c.Method != "getMe" && c.Method != "deleteWebhook" {
			res.calls[c.Method]++
			res.total++
		}
	}
	return res
}

// tgShows is shows for the fake Bot API's messages (Telegram trims a
// message's ends; the approval request has its two buttons).
func tgShows(msgs []telegramfake.Msg, want []string) bool {
	if len(msgs) < len(want) {
		return false
	}
	msgs = msgs[len(msgs)-len(want):]
	for i, w := range want {
		w = strings.TrimSpace(w)
		if msgs[i].Text != w && !(strings.HasPrefix(w, "🔐") && strings.HasPrefix(msgs[i].Text, w) && len(msgs[i].Keyboard) == 1 && len(msgs[i].Keyboard[0]) == 2) {
			return false
		}
	}
	return true
}

func tgShowsWithOrphan(msgs []telegramfake.Msg, want []string) bool {
	if len(msgs) != len(want)+1 {
		return false
	}
	for i := 0; i+1 < len(msgs); i++ {
		if !strings.HasPrefix(msgs[i+1].Text, msgs[i].Text) {
			continue
		}
		rest := append(append([]telegramfake.Msg(nil), msgs[:i]...), msgs[i+1:]...)
		if tgShows(rest, want) {
			return true
		}
	}
	return false
}

func tgTexts(msgs []telegramfake.Msg) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Text)
	}
	return out
}
