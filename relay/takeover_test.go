package relay_test

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

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/killtest"
)

// TestDeadReplicasChatsAreTakenOver runs two relay processes that share four
// shards, SIGKILLs one while its chats' answers stream, and checks that the
// other finishes every chat within seconds, each message created once (but
// for the one window, a message whose id the dead one had not stored).
func TestDeadReplicasChatsAreTakenOver(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the relay binary")
	}
	bin := killtest.Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("takeover%d:", rand.Int64())
	plat := fakeplatform.New(relay.Limits{})
	srv := httptest.NewServer(plat.Handler())
	defer srv.Close()
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	var logs killtest.Logs
	start := func(id string) *exec.Cmd {
		cmd := exec.Command(bin)
		cmd.Env = append(os.Environ(), "REDIS_URL=redis://"+red.Addr+"/0", "LETTAQ_KEY_PREFIX="+prefix,
			"LETTAQ_HTTP_ADDR=off", "LETTAQ_RELAY_FAKE_URL="+srv.URL, "LETTAQ_RELAY_LEASE=2s",
			"LETTAQ_RELAY_EDIT_EVERY=100ms", "LETTAQ_RELAY_SHARDS=4", "LETTAQ_RELAY_ID="+id, "LETTAQ_LOG_FORMAT=text")
		cmd.Stderr = &logs
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	a, b := start("a"), start("b")
	defer func() { _ = b.Process.Kill(); _ = b.Wait() }()
	// Wait until they share the shards: two each.
	for {
		held := map[string]int{}
		for sh := range 4 {
			v, _ := rdb.Get(ctx, fmt.Sprintf("%srelay:shard:%d", prefix, sh)).Result()
			held[strings.SplitN(v, ":", 2)[0]]++
		}
		if held["a"] == 2 && held["b"] == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the replicas do not share the shards: %v\n%s", held, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	const chats = 12
	convs := make([]record.Conversation, chats)
	for i := range convs {
		convs[i] = record.Conversation{Integration: "fake", ChatID: fmt.Sprintf("chat%d", i)}
	}
	words := strings.Fields(strings.Repeat("alpha beta gamma delta ", 10))
	emitted := make(chan error, 1)
	go func() {
		for w := range words {
			for _, c := range convs {
				d := record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t-" + c.ChatID, Text: words[w] + " "}
				if _, err := replies.Emit(ctx, c, d); err != nil {
					emitted <- err
					return
				}
			}
			time.Sleep(20 * time.Millisecond)
		}
		for _, c := range convs {
			f := record.ReplyEvent{Type: record.EventAnswer, TaskID: "t-" + c.ChatID, Text: strings.Join(words, " ") + " "}
			if _, err := replies.EmitAnswerOnce(ctx, c, f); err != nil {
				emitted <- err
				return
			}
		}
		emitted <- nil
	}()
	// Kill a once every chat shows its first message.
	if err := plat.Wait(ctx, func(p *fakeplatform.Platform) bool {
		for _, c := range convs {
			if len(p.Messages(c)) == 0 {
				return false
			}
		}
		return true
	}); err != nil {
		t.Fatal(err)
	}
	_ = a.Process.Signal(syscall.SIGKILL)
	_ = a.Wait()
	killedAt := time.Now()
	if err := <-emitted; err != nil {
		t.Fatal(err)
	}
	want := strings.Join(words, " ") + " "
	err := plat.Wait(ctx, func(p *fakeplatform.Platform) bool {
		for _, c := range convs {
			m := p.Messages(c)
			if len(m) == 0 || m[len(m)-1].Text != want {
				return false
			}
		}
		return true
	})
	if err != nil {
		t.Fatalf("not every chat was finished after the kill:\n%s", logs.String())
	}
	t.Logf("every chat finished %v after the kill (lease 2s)", time.Since(killedAt).Round(10*time.Millisecond))
	for _, c := range convs {
		if n := len(plat.Messages(c)); n != 1 {
			t.Logf("%s shows %d messages (more than one only in the window)", c, n)
			if n > 2 {
				t.Errorf("%s shows %d messages, want 1 (2 at most in the window)", c, n)
			}
		}
	}
}
