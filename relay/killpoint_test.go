package relay_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/store"
)

var (
	buildOnce sync.Once
	relayBin  string
	buildErr  error
)

// relayBinary builds cmd/relay once per test process.
func relayBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "relaybin")
		if err != nil {
			buildErr = err
			return
		}
		relayBin = filepath.Join(dir, "relay")
		out, err := exec.Command("go", "build", "-o", relayBin, "github.com/lettaq/lettaq/cmd/relay").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return relayBin
}

// killScenario is one turn as a worker writes it, and what the chat must
// show in the end.
type killScenario struct {
	name   string
	events []queue.ReplyEvent
	want   []string // the visible messages' texts (a prefix match for the approval request)
	// quiet: the turn shows no status (a notify), so its end clears none.
	quiet bool
}

const killPartLimit = 60

func killScenarios() []killScenario {
	e := func(typ queue.EventType, f func(*queue.ReplyEvent)) queue.ReplyEvent {
		ev := queue.ReplyEvent{Type: typ, TaskID: "turn1", Otid: "otid1", RunID: "run1"}
		if f != nil {
			f(&ev)
		}
		return ev
	}
	delta := func(s string) queue.ReplyEvent {
		return e(queue.EventAnswerDelta, func(ev *queue.ReplyEvent) { ev.Text = s })
	}
	accepted := e(queue.EventAccepted, func(ev *queue.ReplyEvent) { ev.Phase = queue.PhaseQueued })
	streaming := e(queue.EventPhase, func(ev *queue.ReplyEvent) { ev.Phase = queue.PhaseStreaming })

	long := strings.Repeat("The quick brown fox jumps. ", 6) // 162 units: 3 parts of ≤ 60
	var longEvents []queue.ReplyEvent
	longEvents = append(longEvents, accepted, streaming)
	for i := 0; i < len(long); i += 14 {
		longEvents = append(longEvents, delta(long[i:min(i+14, len(long))]))
	}
	parts := []string{long[:60], long[60:120], long[120:]}
	longEvents = append(longEvents, e(queue.EventAnswer, func(ev *queue.ReplyEvent) { ev.Text, ev.Parts = long, parts }))

	approval := e(queue.EventApprovalRequired, func(ev *queue.ReplyEvent) {
		ev.Tool = &queue.ToolEvent{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}
		ev.Approval = &queue.ApprovalEvent{RequestTaskID: "turn1", Calls: []queue.ToolEvent{*ev.Tool}, ExpiresAt: time.Now().Add(time.Hour)}
	})
	// A notify, sent twice with its key (a retried call: one event), longer
	// than the part limit: two messages, cut at a word boundary.
	note := "Reminder: the quarterly report is due on Friday; the draft is in the shared folder."
	notify := queue.ReplyEvent{Type: queue.EventNotify, TaskID: queue.NotifyTaskPrefix + "report-due", Text: note}
	return []killScenario{
		{name: "notify", events: []queue.ReplyEvent{notify, notify}, want: queue.SplitMessage(note, killPartLimit), quiet: true},
		{"quick", []queue.ReplyEvent{accepted, streaming,
			e(queue.EventAnswer, func(ev *queue.ReplyEvent) { ev.Text = "Hello there!" })}, []string{"Hello there!"}, false},
		{"streamed-parts", longEvents, parts, false},
		{"tool", []queue.ReplyEvent{accepted,
			e(queue.EventTool, func(ev *queue.ReplyEvent) { ev.Tool = &queue.ToolEvent{Name: "weather", Status: "call"} }),
			e(queue.EventTool, func(ev *queue.ReplyEvent) {
				ev.Tool = &queue.ToolEvent{Name: "weather", Status: "success", Return: "sunny"}
			}),
			delta("It is "), delta("sunny."),
			e(queue.EventAnswer, func(ev *queue.ReplyEvent) { ev.Text = "It is sunny." })}, []string{"It is sunny."}, false},
		{"approval", []queue.ReplyEvent{accepted, delta("I will delete it."), approval},
			[]string{"I will delete it.", "🔐 The agent asks to run:"}, false},
		{"error", []queue.ReplyEvent{accepted, delta("Partial"),
			e(queue.EventError, func(ev *queue.ReplyEvent) { ev.Text, ev.Permanent = "boom", true })},
			[]string{"Partial\n\n⚠️ Sorry, this answer failed: boom"}, false},
		{"cancelled", []queue.ReplyEvent{accepted, delta("Let me"),
			e(queue.EventError, func(ev *queue.ReplyEvent) { ev.Text, ev.Permanent, ev.StopReason = "Let me", true, "cancelled" })},
			[]string{"Let me\n\n⏹ Stopped."}, false},
	}
}

// TestKillAtEveryStepShowsEachMessageOnce SIGKILLs the relay process at every
// step of a turn (each occurrence of each step, until a run does not reach
// it), lets a second relay take the shard over, and counts what the fake
// platform received: every scenario ends showing exactly its messages, each
// created once, except a kill between the platform's accept of a new message
// and the store of its id (step send.after): the one window, where the
// message is created twice.
func TestKillAtEveryStepShowsEachMessageOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills the relay binary a few hundred times")
	}
	bin := relayBinary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	var windows, runs int
	for _, sc := range killScenarios() {
		t.Run(sc.name, func(t *testing.T) {
			var killedAt []string
			for _, step := range relay.Steps {
				for n := 1; n <= 8; n++ {
					at := fmt.Sprintf("%s#%d", step, n)
					reached, dup := killRun(t, bin, red.Addr, rdb, sc, at)
					runs++
					if dup {
						windows++
						at += " (window)"
					}
					if !reached {
						break
					}
					killedAt = append(killedAt, at)
				}
			}
			t.Logf("%s: killed at %d points, each then showing %d message(s), each created once but in the window: %s",
				sc.name, len(killedAt), len(sc.want), strings.Join(killedAt, ", "))
		})
	}
	t.Logf("%d kill runs; %d landed in the window (killed after the platform's accept, before the id's save)", runs, windows)
}

// killRun plays sc against a relay killed at step, then a relay that is not,
// and checks the chat. It reports whether the kill happened, and whether a
// message was created twice (allowed only for step send.after).
func killRun(t *testing.T, bin, addr string, rdb *redis.Client, sc killScenario, step string) (reached, dup bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("kill%d:", rand.Int64())
	plat := fakeplatform.New(relay.Limits{PartLimit: killPartLimit})
	srv := httptest.NewServer(plat.Handler())
	defer srv.Close()
	conv := queue.Conversation{Integration: "fake", ChatID: "chat1"}

	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	client, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: addr}, Replies: replies, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	env := []string{"REDIS_URL=redis://" + addr + "/0", "LETTAQ_KEY_PREFIX=" + prefix, "LETTAQ_HTTP_ADDR=off",
		"LETTAQ_RELAY_FAKE_URL=" + srv.URL, "LETTAQ_RELAY_FAKE_PART_LIMIT=" + fmt.Sprint(killPartLimit), "LETTAQ_RELAY_LEASE=1s",
		"LETTAQ_RELAY_EDIT_EVERY=100ms", "LETTAQ_RELAY_SHARDS=4", "LETTAQ_LOG_LEVEL=info", "LETTAQ_LOG_FORMAT=text"}
	var logs syncBuf
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
	// The worker writes the turn while the relay runs: a streamed answer grows.
	go func() {
		for _, ev := range sc.events {
			var err error
			switch {
			case ev.Type == queue.EventNotify: // as an agent's job sends it
				_, err = client.Notify(ctx, queue.Notice{Chat: conv, Text: ev.Text, Key: strings.TrimPrefix(ev.TaskID, queue.NotifyTaskPrefix)})
			case ev.Type.Final():
				_, err = replies.EmitAnswerOnce(ctx, conv, ev)
			default:
				_, err = replies.Emit(ctx, conv, ev)
			}
			if err != nil {
				t.Error(err)
				return
			}
			time.Sleep(40 * time.Millisecond)
		}
	}()
	window := strings.HasPrefix(step, "send.after#")
	done := func(*fakeplatform.Platform) bool {
		return (shows(plat.Messages(conv), sc.want) || window && showsWithOrphan(plat.Messages(conv), sc.want)) && (sc.quiet || cleared(plat.Calls()))
	}
	// Either the kill comes, or the first relay shows the whole turn and
	// moves its cursor to the stream's last entry (its last step: a turn
	// shown but not yet advanced has kill points left) without reaching step.
	select {
	case err := <-exited:
		if ws, ok := err.(*exec.ExitError); !ok || ws.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
			t.Fatalf("%s: relay exited with %v, want SIGKILL", step, err)
		}
		reached = true
	case <-settledCh(ctx, rdb, prefix, conv, waitCh(ctx, plat, done)):
		_ = killed.Process.Signal(syscall.SIGTERM)
		// It may have reached step (after its last write) meanwhile.
		var ws syscall.WaitStatus
		if ee, ok := (<-exited).(*exec.ExitError); ok {
			ws, _ = ee.Sys().(syscall.WaitStatus)
		}
		reached = ws.Signaled() && ws.Signal() == syscall.SIGKILL
	case <-ctx.Done():
		_ = killed.Process.Kill()
		<-exited
		t.Fatalf("%s: neither killed nor shown: the chat shows %q, want %q\nrelay log:\n%s", step, texts(plat.Messages(conv)), sc.want, logs.String())
	}
	if reached {
		// The second relay shows the turn and makes it durable (anything it
		// would send again, it sends before its cursor reaches the end).
		second := start()
		var err error
		select {
		case <-settledCh(ctx, rdb, prefix, conv, waitCh(ctx, plat, done)):
		case <-ctx.Done():
			err = ctx.Err()
		}
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
		if err != nil {
			t.Fatalf("%s: the answer was lost: the chat shows %q, want %q\nrelay log:\n%s", step, texts(plat.Messages(conv)), sc.want, logs.String())
		}
	}
	sends := 0
	for _, c := range plat.Calls() {
		if c.Method == "send" && c.Status == 200 {
			sends++
		}
	}
	visible := plat.Messages(conv)
	if sc.quiet {
		for _, c := range plat.Calls() {
			if c.Method == "status" {
				t.Errorf("%s: a status call (%s) for a turn that shows none", step, c.Kind)
				break
			}
		}
	}
	switch {
	case sends == len(sc.want) && len(visible) == len(sc.want):
	case window && sends == len(sc.want)+1 && showsWithOrphan(visible, sc.want):
		dup = true
		t.Logf("%s: the window: one message created twice; the chat shows %q", step, texts(visible))
	default:
		t.Errorf("%s: %d sends, chat shows %q, want %d messages %q, each created once", step, sends, texts(visible), len(sc.want), sc.want)
	}
	return reached, dup
}

// shows reports whether the chat's last messages are want (the approval
// request by its beginning).
func shows(msgs []fakeplatform.Msg, want []string) bool {
	if len(msgs) < len(want) {
		return false
	}
	msgs = msgs[len(msgs)-len(want):]
	for i, w := range want {
		if msgs[i].Text != w && !(strings.HasPrefix(w, "🔐") && strings.HasPrefix(msgs[i].Text, w) && len(msgs[i].Buttons) == 2) {
			return false
		}
	}
	return true
}

// showsWithOrphan reports whether msgs are want plus one orphan: a message
// sent in the window, frozen at a beginning of what its slot's message (the
// next one) shows in the end.
func showsWithOrphan(msgs []fakeplatform.Msg, want []string) bool {
	if len(msgs) != len(want)+1 {
		return false
	}
	for i := 0; i+1 < len(msgs); i++ {
		if !strings.HasPrefix(msgs[i+1].Text, msgs[i].Text) {
			continue
		}
		rest := append(append([]fakeplatform.Msg(nil), msgs[:i]...), msgs[i+1:]...)
		if shows(rest, want) {
			return true
		}
	}
	return false
}

// cleared reports whether the last status call took the indicator away.
func cleared(calls []fakeplatform.Call) bool {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Method == "status" {
			return calls[i].Kind == relay.StatusClear && calls[i].Status == 200
		}
	}
	return false
}

func texts(msgs []fakeplatform.Msg) []string {
	var out []string
	for _, m := range msgs {
		out = append(out, m.Text)
	}
	return out
}

// settledCh is closed once shown is and the relay's cursor of conv is at
// the last entry of its stream (the chat's state is durable: nothing left to
// do). Polled: the cursor's write sends no signal the test could wait on.
func settledCh(ctx context.Context, rdb *redis.Client, prefix string, conv queue.Conversation, shown <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	chatKey := store.New(rdb, prefix, 0).ChatKey(conv)
	stream := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix}).Key(conv)
	go func() {
		select {
		case <-shown:
		case <-ctx.Done():
			return
		}
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			last, err := rdb.XRevRangeN(ctx, stream, "+", "-", 1).Result()
			cursor, _ := rdb.HGet(ctx, chatKey, "cursor").Result()
			if err == nil && len(last) == 1 && cursor == last[0].ID {
				close(ch)
				return
			}
			select {
			case <-tick.C:
			case <-ctx.Done():
				return
			}
		}
	}()
	return ch
}

func waitCh(ctx context.Context, p *fakeplatform.Platform, cond func(*fakeplatform.Platform) bool) <-chan struct{} {
	ch := make(chan struct{})
	go func() {
		if p.Wait(ctx, cond) == nil {
			close(ch)
		}
	}()
	return ch
}

// syncBuf collects the relays' logs.
type syncBuf struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
