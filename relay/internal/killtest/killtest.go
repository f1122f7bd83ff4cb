// Package killtest is the relay's kill-point test, for every platform: the
// relay binary is SIGKILLed at each step of a turn, a second relay takes the
// chat over, and the platform's fake (a fakeplatform.Platform, behind its own
// wire: the fake platform's HTTP, a fake Slack…) must end showing each
// message once, but in the one window (killed after the platform's accept
// of a new message, before the store of its id).
package killtest

import (
	"context"
	"fmt"
	"math/rand/v2"
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

	"github.com/lettaq/lettaq/internal/split"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	"github.com/lettaq/lettaq/relay/internal/store"
)

var (
	buildOnce sync.Once
	relayBin  string
	buildErr  error
)

// Binary builds cmd/relay once per test process.
func Binary(t *testing.T) string {
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

// Scenario is one turn as a worker writes it, and what the chat must show
// in the end.
type Scenario struct {
	Name   string
	Events []record.ReplyEvent
	Want   []string // the visible messages' texts (a prefix match for the approval request)
	// Quiet: the turn shows no status (a notify), so its end clears none.
	Quiet bool
}

// PartLimit is the platform's part limit the scenarios are written for:
// give it to the relay (a long answer is three parts).
const PartLimit = 60

// Scenarios are the turn kinds: a notify, a quick answer, a streamed answer
// in three parts, a tool, an approval request, an error, a cancel.
func Scenarios() []Scenario {
	e := func(typ record.EventType, f func(*record.ReplyEvent)) record.ReplyEvent {
		ev := record.ReplyEvent{Type: typ, TaskID: "turn1", Otid: "otid1", RunID: "run1"}
		if f != nil {
			f(&ev)
		}
		return ev
	}
	delta := func(s string) record.ReplyEvent {
		return e(record.EventAnswerDelta, func(ev *record.ReplyEvent) { ev.Text = s })
	}
	accepted := e(record.EventAccepted, func(ev *record.ReplyEvent) { ev.Phase = record.PhaseQueued })
	streaming := e(record.EventPhase, func(ev *record.ReplyEvent) { ev.Phase = record.PhaseStreaming })

	long := strings.Repeat("The quick brown fox jumps. ", 6) // 162 units: 3 parts of ≤ 60
	var longEvents []record.ReplyEvent
	longEvents = append(longEvents, accepted, streaming)
	for i := 0; i < len(long); i += 14 {
		longEvents = append(longEvents, delta(long[i:min(i+14, len(long))]))
	}
	parts := []string{long[:60], long[60:120], long[120:]}
	longEvents = append(longEvents, e(record.EventAnswer, func(ev *record.ReplyEvent) { ev.Text, ev.Parts = long, parts }))

	approval := e(record.EventApprovalRequired, func(ev *record.ReplyEvent) {
		ev.Tool = &record.ToolEvent{Name: "delete_file", Arguments: `{"path":"/tmp/x"}`}
		ev.Approval = &record.ApprovalEvent{RequestTaskID: "turn1", Calls: []record.ToolEvent{*ev.Tool}, ExpiresAt: time.Now().Add(time.Hour)}
	})
	// A notify, sent twice with its key (a retried call: one event), longer
	// than the part limit: two messages, cut at a word boundary.
	note := "Reminder: the quarterly report is due on Friday; the draft is in the shared folder."
	notify := record.ReplyEvent{Type: record.EventNotify, TaskID: queue.NotifyTaskPrefix + "report-due", Text: note}
	return []Scenario{
		{Name: "notify", Events: []record.ReplyEvent{notify, notify}, Want: split.Message(note, PartLimit), Quiet: true},
		{"quick", []record.ReplyEvent{accepted, streaming,
			e(record.EventAnswer, func(ev *record.ReplyEvent) { ev.Text = "Hello there!" })}, []string{"Hello there!"}, false},
		{"streamed-parts", longEvents, parts, false},
		{"tool", []record.ReplyEvent{accepted,
			e(record.EventTool, func(ev *record.ReplyEvent) { ev.Tool = &record.ToolEvent{Name: "weather", Status: "call"} }),
			e(record.EventTool, func(ev *record.ReplyEvent) {
				ev.Tool = &record.ToolEvent{Name: "weather", Status: "success", Return: "sunny"}
			}),
			delta("It is "), delta("sunny."),
			e(record.EventAnswer, func(ev *record.ReplyEvent) { ev.Text = "It is sunny." })}, []string{"It is sunny."}, false},
		{"approval", []record.ReplyEvent{accepted, delta("I will delete it."), approval},
			[]string{"I will delete it.", "🔐 The agent asks to run:"}, false},
		{"error", []record.ReplyEvent{accepted, delta("Partial"),
			e(record.EventError, func(ev *record.ReplyEvent) { ev.Text, ev.Permanent = "boom", true })},
			[]string{"Partial\n\n⚠️ Sorry, this answer failed: boom"}, false},
		{"cancelled", []record.ReplyEvent{accepted, delta("Let me"),
			e(record.EventError, func(ev *record.ReplyEvent) { ev.Text, ev.Permanent, ev.StopReason = "Let me", true, "cancelled" })},
			[]string{"Let me\n\n⏹ Stopped."}, false},
	}
}

// Platform is one run's platform: the fake the relay delivers to, the
// relay's environment that points it there, and the chat the turn is in.
type Platform struct {
	Fake *fakeplatform.Platform
	Env  []string
	Conv record.Conversation
	// Close, when set, stops the platform after the run.
	Close func()
}

// Result is what one scenario's kill runs found.
type Result struct {
	Scenario string
	// KilledAt are the steps the relay was killed at (each then showing the
	// scenario's messages, each created once but in the window).
	KilledAt []string
	Runs     int
	Windows  int // runs that landed in the window
}

// Run SIGKILLs the relay process at every step of each scenario (each
// occurrence of each step, until a run does not reach it), lets a second
// relay take the shard over, and checks what newPlatform's fake received:
// every scenario ends showing exactly its messages, each created once,
// except a kill between the platform's accept of a new message and the
// store of its id (step send.after): the one window, where the message is
// created twice.
func Run(t *testing.T, scenarios []Scenario, newPlatform func(t *testing.T) Platform) []Result {
	t.Helper()
	bin := Binary(t)
	red := testredis.StartPersistent(t)
	rdb := red.Client(t)
	var out []Result
	for _, sc := range scenarios {
		res := Result{Scenario: sc.Name}
		t.Run(sc.Name, func(t *testing.T) {
			for _, step := range relay.Steps {
				for n := 1; n <= 8; n++ {
					at := fmt.Sprintf("%s#%d", step, n)
					reached, dup := killRun(t, bin, red.Addr, rdb, sc, at, newPlatform(t))
					res.Runs++
					if dup {
						res.Windows++
						at += " (window)"
					}
					if !reached {
						break
					}
					res.KilledAt = append(res.KilledAt, at)
				}
			}
			t.Logf("%s: killed at %d points, each then showing %d message(s), each created once but in the window: %s",
				sc.Name, len(res.KilledAt), len(sc.Want), strings.Join(res.KilledAt, ", "))
		})
		out = append(out, res)
	}
	return out
}

// Once plays sc against one relay that is not killed and returns the calls
// the platform received: the platform calls of one answered turn.
func Once(t *testing.T, sc Scenario, p Platform) []fakeplatform.Call {
	t.Helper()
	bin := Binary(t)
	red := testredis.StartPersistent(t)
	// A step the turn never reaches the ninth time: the relay is not killed.
	if reached, _ := killRun(t, bin, red.Addr, red.Client(t), sc, "advance.after#99", p); reached {
		t.Fatalf("%s: the relay was killed", sc.Name)
	}
	return p.Fake.Calls()
}

// killRun plays sc against a relay killed at step, then a relay that is not,
// and checks the chat. It reports whether the kill happened, and whether a
// message was created twice (allowed only for step send.after).
func killRun(t *testing.T, bin, addr string, rdb *redis.Client, sc Scenario, step string, p Platform) (reached, dup bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	prefix := fmt.Sprintf("kill%d:", rand.Int64())
	if p.Close != nil {
		defer p.Close()
	}
	plat, conv := p.Fake, p.Conv

	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	client, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: addr}, Replies: replies, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	env := append([]string{"REDIS_URL=redis://" + addr + "/0", "LETTAQ_KEY_PREFIX=" + prefix, "LETTAQ_HTTP_ADDR=off",
		"LETTAQ_RELAY_LEASE=1s", "LETTAQ_RELAY_EDIT_EVERY=100ms", "LETTAQ_RELAY_SHARDS=4", "LETTAQ_LOG_LEVEL=info", "LETTAQ_LOG_FORMAT=text"},
		p.Env...)
	var logs Logs
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
	// The run settles only once every event is written (a notify's retried
	// call may come after the chat already shows it).
	written := make(chan struct{})
	defer func() { <-written }()
	go func() {
		defer close(written)
		for _, ev := range sc.Events {
			var err error
			switch {
			case ev.Type == record.EventNotify: // as an agent's job sends it
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
		return (shows(plat.Messages(conv), sc.Want) || window && showsWithOrphan(plat.Messages(conv), sc.Want)) && (sc.Quiet || cleared(plat.Calls()))
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
	case <-settledCh(ctx, rdb, prefix, conv, written, waitCh(ctx, plat, done)):
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
		t.Fatalf("%s: neither killed nor shown: the chat shows %q, want %q\nrelay log:\n%s", step, texts(plat.Messages(conv)), sc.Want, logs.String())
	}
	if reached {
		// The second relay shows the turn and makes it durable (anything it
		// would send again, it sends before its cursor reaches the end).
		second := start()
		var err error
		select {
		case <-settledCh(ctx, rdb, prefix, conv, written, waitCh(ctx, plat, done)):
		case <-ctx.Done():
			err = ctx.Err()
		}
		_ = second.Process.Signal(syscall.SIGTERM)
		_ = second.Wait()
		if err != nil {
			t.Fatalf("%s: the answer was lost: the chat shows %q, want %q\nrelay log:\n%s", step, texts(plat.Messages(conv)), sc.Want, logs.String())
		}
	}
	sends := 0
	for _, c := range plat.Calls() {
		if c.Method == "send" && c.Status == 200 {
			sends++
		}
	}
	visible := plat.Messages(conv)
	if sc.Quiet {
		for _, c := range plat.Calls() {
			if c.Method == "status" {
				t.Errorf("%s: a status call (%s) for a turn that shows none", step, c.Kind)
				break
			}
		}
	}
	switch {
	case sends == len(sc.Want) && len(visible) == len(sc.Want):
	case window && sends == len(sc.Want)+1 && showsWithOrphan(visible, sc.Want):
		dup = true
		t.Logf("%s: the window: one message created twice; the chat shows %q", step, texts(visible))
	default:
		t.Errorf("%s: %d sends, chat shows %q, want %d messages %q, each created once", step, sends, texts(visible), len(sc.Want), sc.Want)
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

// Settled is closed once shown is and the relay's cursor of conv is at the
// last entry of its stream: for a platform's own kill-point run.
func Settled(ctx context.Context, rdb *redis.Client, prefix string, conv record.Conversation, shown <-chan struct{}) <-chan struct{} {
	return settledCh(ctx, rdb, prefix, conv, closed, shown)
}

// closed is a channel already closed: nothing left to wait for.
var closed = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// settledCh is closed once written and shown are and the relay's cursor of conv is at
// the last entry of its stream (the chat's state is durable: nothing left to
// do). Polled: the cursor's write sends no signal the test could wait on.
func settledCh(ctx context.Context, rdb *redis.Client, prefix string, conv record.Conversation, written, shown <-chan struct{}) <-chan struct{} {
	ch := make(chan struct{})
	chatKey := store.New(rdb, prefix, 0).ChatKey(conv)
	stream := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix}).Key(conv)
	go func() {
		for _, c := range []<-chan struct{}{written, shown} {
			select {
			case <-c:
			case <-ctx.Done():
				return
			}
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

// Logs collects relay processes' logs (safe for concurrent writes).
type Logs struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *Logs) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *Logs) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
