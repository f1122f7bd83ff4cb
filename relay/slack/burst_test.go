package slack_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/killtest"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// TestSlackBurstOf50Chats: 50 chats answer at once, one relay at its
// defaults, against the fake Slack's limits. Two shapes: 50 DMs (one
// channel each) streaming a 2,000-character answer, which meets
// chat.update's workspace tier; and 50 threads of one channel each getting
// a quick answer, which meets chat.postMessage's pace per channel. Every
// chat ends showing its answer once, and the adapter's pace keeps every
// call within Slack's limits (none answered 429); the log says the calls
// and how long the last chat waited.
func TestSlackBurstOf50Chats(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay binary against 50 chats for a minute or two")
	}
	bin := killtest.Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	long := strings.Repeat("Slack streams this answer in one message, edited as it grows. ", 33)[:2000]
	for _, shape := range []struct {
		name   string
		conv   func(i int) record.Conversation
		deltas []string
		answer string
	}{
		{"50 DMs, 2,000 characters streamed", func(i int) record.Conversation {
			return relayslack.Conversation(fmt.Sprintf("D%02d", i), "1700000000.000001")
		},
			chunks(long, 40), long},
		{"50 threads of one channel, quick answer", func(i int) record.Conversation {
			return relayslack.Conversation("C1", fmt.Sprintf("1700000000.%06d", i))
		},
			nil, "Hello there!"},
	} {
		t.Run(shape.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
			defer cancel()
			f := slackfake.New(slackfake.Options{})
			defer f.Stop()
			prefix := fmt.Sprintf("burst%d:", rand.Int64())
			replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
			cmd := exec.Command(bin)
			cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+red.Addr+"/0", "LETTAQ_KEY_PREFIX="+prefix, "LETTAQ_LOG_FORMAT=text",
				"LETTAQ_SLACK_BOT_TOKEN="+f.Token(), "LETTAQ_SLACK_SIGNING_SECRET="+f.SigningSecret(), "LETTAQ_SLACK_API_URL="+f.APIURL(),
				"LETTAQ_RELAY_AGENT_ID="+agent, "LETTAQ_HTTP_ADDR=127.0.0.1:0")
			var logs killtest.Logs
			cmd.Stderr = &logs
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()
			start := time.Now()
			var mu sync.Mutex
			var waits []time.Duration
			var wg sync.WaitGroup
			for i := 1; i <= 50; i++ {
				conv := shape.conv(i)
				wg.Add(2)
				go func() { // the worker writes the turn
					defer wg.Done()
					ev := func(typ record.EventType, text string) record.ReplyEvent {
						return record.ReplyEvent{Type: typ, TaskID: "turn-" + conv.ChatID, Otid: "otid", RunID: "run", Text: text, Phase: record.PhaseStreaming}
					}
					_, _ = replies.Emit(ctx, conv, ev(record.EventPhase, ""))
					for _, d := range shape.deltas {
						_, _ = replies.Emit(ctx, conv, ev(record.EventAnswerDelta, d))
						time.Sleep(40 * time.Millisecond)
					}
					if _, err := replies.EmitAnswerOnce(ctx, conv, ev(record.EventAnswer, shape.answer)); err != nil {
						t.Error(err)
					}
				}()
				go func() { // the chat waits for its answer
					defer wg.Done()
					err := f.Platform.Wait(ctx, func(p *fakeplatform.Platform) bool {
						m := p.Messages(conv)
						return len(m) == 1 && m[0].Text == shape.answer
					})
					if err != nil {
						t.Errorf("%s: the answer did not arrive: %v; shows %d messages", conv, err, len(f.Platform.Messages(conv)))
						return
					}
					mu.Lock()
					waits = append(waits, time.Since(start))
					mu.Unlock()
				}()
			}
			wg.Wait()
			if t.Failed() {
				t.Logf("relay log:\n%s", logs.String())
				return
			}
			slices.Sort(waits)
			ok, limited := f.API.Counts()
			delete(ok, "auth.test")
			sends := 0
			for _, c := range f.Platform.Calls() {
				if c.Method == "send" {
					sends++
				}
			}
			if sends != 50 {
				t.Errorf("%d messages posted for 50 answers", sends)
			}
			if len(limited) > 0 {
				t.Errorf("Slack refused calls with 429: %v; the adapter's pace should have kept them within its limits", limited)
			}
			t.Logf("%s: answers shown after p50 %v, last %v; Slack calls ok %v, refused with 429 %v",
				shape.name, waits[24].Round(100*time.Millisecond), waits[49].Round(100*time.Millisecond), ok, limited)
		})
	}
}

func chunks(s string, n int) []string {
	var out []string
	for i := 0; i < len(s); i += n {
		out = append(out, s[i:min(i+n, len(s))])
	}
	return out
}
