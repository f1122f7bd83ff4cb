package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/internal/app"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// The process tests run workers as child processes: the test binary
// re-executes itself with LETTAQ_E2E_WORKER=1, and TestMain then runs a
// worker configured from the environment instead of the tests.
const (
	envChild   = "LETTAQ_E2E_WORKER"
	envRedis   = "LETTAQ_E2E_REDIS_ADDR"
	envRedisDB = "LETTAQ_E2E_REDIS_DB"
	envQueue   = "LETTAQ_E2E_QUEUE"
	envPrefix  = "LETTAQ_E2E_PREFIX"
	envLetta   = "LETTAQ_E2E_LETTA_URL"
	envID      = "LETTAQ_E2E_WORKER_ID"
	// Optional: the ordering lease, coalesced integrations (comma list),
	// "off" to disable ordering.
	envOrderLease = "LETTAQ_E2E_ORDERING_LEASE"
	envCoalesce   = "LETTAQ_E2E_COALESCE"
	envOrdering   = "LETTAQ_E2E_ORDERING"
	// envThreadMode: the worker's thread mode (default agent); "agent" as
	// the ordering scope with envOrdering=agent.
	envThreadMode = "LETTAQ_E2E_THREAD_MODE"
	// envTakeover: the worker's TakeoverAfter ("off": no takeover).
	envTakeover = "LETTAQ_E2E_TAKEOVER"
	// envApp runs the worker as cmd/worker wires it (app.StartWorker,
	// with its HTTP server on a free port, printed as "HTTP <addr>").
	envApp = "LETTAQ_E2E_APP"
	// appToken is the app worker's LETTAQ_HTTP_TOKEN.
	appToken = "e2e-token"
)

func TestMain(m *testing.M) {
	if os.Getenv(envChild) == "1" {
		os.Exit(childWorker())
	}
	os.Exit(m.Run())
}

// childWorker runs a worker until SIGTERM (graceful) or SIGKILL.
func childWorker() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("worker", os.Getenv(envID))
	if os.Getenv(envApp) == "1" {
		return childAppWorker(log)
	}
	db := 0
	fmt.Sscan(os.Getenv(envRedisDB), &db)
	b := testBudget()
	lc, err := agentclient.New(agentclient.Config{BaseURL: os.Getenv(envLetta), RequestTimeout: b.RequestTimeout})
	if err != nil {
		log.Error("letta client", "error", err)
		return 2
	}
	prefix := os.Getenv(envPrefix)
	ord := queue.Ordering{Off: os.Getenv(envOrdering) == "off", Config: ordering.Config{Prefix: prefix + "ord:"}}
	if os.Getenv(envOrdering) == "agent" {
		ord.Scope = ordering.ScopeAgent
	}
	mode := queue.ThreadMode(os.Getenv(envThreadMode))
	if mode == "" {
		mode = queue.ThreadAgent
	}
	if v := os.Getenv(envOrderLease); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			log.Error("ordering lease", "error", err)
			return 2
		}
		ord.Config.Lease = d
	}
	if v := os.Getenv(envCoalesce); v != "" {
		ord.Coalesce = strings.Split(v, ",")
	}
	var takeover time.Duration
	if os.Getenv(envTakeover) == "off" {
		takeover = -1
	}
	w, err := queue.NewWorker(queue.WorkerConfig{
		Takeover: queue.FastTakeover{After: takeover},
		Redis:    asynq.RedisClientOpt{Addr: os.Getenv(envRedis), DB: db}, Letta: queue.LettaConnection{Client: lc},
		Budget: b, Concurrency: 50,
		Queues: map[string]int{os.Getenv(envQueue): 1}, ShutdownTimeout: 2 * time.Second, Logger: log,
		WorkerID: os.Getenv(envID),
		Stores: queue.WorkerStores{
			RepliesOptions: queue.RepliesOptions{Prefix: prefix},
			JournalOptions: queue.JournalOptions{Prefix: prefix, Retention: time.Hour},
		},
		Timing: queue.WorkerTiming{
			HeartbeatInterval: 200 * time.Millisecond, DeltaMaxAge: 100 * time.Millisecond,
			StuckRetryDelay: 200 * time.Millisecond, DelayedTaskCheckInterval: 200 * time.Millisecond,
			TaskCheckInterval: 50 * time.Millisecond,
		},
		Ordering:   ord,
		ThreadMode: mode,
	})
	if err != nil {
		log.Error("worker config", "error", err)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	fmt.Println("READY")
	if err := w.Run(ctx); err != nil {
		log.Error("worker", "error", err)
		return 1
	}
	log.Info("worker exited cleanly")
	return 0
}

// childAppWorker runs the worker as cmd/worker wires it (see envApp)
// until SIGTERM or SIGKILL.
func childAppWorker(log *slog.Logger) int {
	vars := map[string]string{
		"REDIS_URL":                  fmt.Sprintf("redis://%s/%s", os.Getenv(envRedis), os.Getenv(envRedisDB)),
		"LETTAQ_KEY_PREFIX":          os.Getenv(envPrefix),
		"LETTAQ_QUEUES":              os.Getenv(envQueue),
		"LETTA_BASE_URL":             os.Getenv(envLetta),
		"LETTAQ_WORKER_ID":           os.Getenv(envID),
		"LETTAQ_HTTP_ADDR":           "127.0.0.1:0",
		"LETTAQ_HTTP_TOKEN":          appToken,
		"LETTAQ_CONCURRENCY":         "50",
		"LETTAQ_TASK_CHECK_INTERVAL": "50ms",
		"LETTAQ_HEARTBEAT_INTERVAL":  "200ms",
		"LETTAQ_SHUTDOWN_TIMEOUT":    "2s",
	}
	cfg, err := app.ParseWorkerSettings(nil, func(k string) string { return vars[k] }, io.Discard)
	if err != nil {
		log.Error("worker config", "error", err)
		return 2
	}
	cfg.Budget = testBudget()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	r, err := app.StartWorker(ctx, cfg, log, io.Discard)
	if err != nil {
		log.Error("start worker", "error", err)
		return 2
	}
	fmt.Println("HTTP " + r.HTTPAddr)
	fmt.Println("READY")
	<-r.Done()
	if err := r.Err(); err != nil {
		log.Error("worker", "error", err)
		return 1
	}
	return 0
}

// proc is a worker child process.
type proc struct {
	id   string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	http string // an app worker's HTTP address (envApp)
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// spawnWorker starts a worker process and waits until it runs. extraEnv
// adds variables (envOrderLease, envCoalesce, envOrdering).
func (e *env) spawnWorker(id string, extraEnv ...string) *proc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), extraEnv...), envChild+"=1", envRedis+"="+e.redis.Addr, fmt.Sprintf("%s=%d", envRedisDB, e.redis.DB),
		envQueue+"="+e.queue, envPrefix+"="+e.prefix, envLetta+"="+e.sim.URL, envID+"="+id)
	p := &proc{id: id, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.out
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		e.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		e.t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		once := sync.Once{}
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), "HTTP "); ok {
				p.http = addr // before READY: read once ready is closed
			}
			if strings.TrimSpace(sc.Text()) == "READY" {
				once.Do(func() { close(ready) })
			}
		}
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	e.t.Cleanup(func() {
		p.signal(syscall.SIGKILL)
		<-p.done
		if e.t.Failed() {
			e.t.Logf("--- worker %s output (tail):\n%s", id, tail(p.out.String(), 4000))
		}
	})
	select {
	case <-ready:
	case <-p.done:
		e.t.Fatalf("worker %s exited at start: %s", id, p.out.String())
	case <-time.After(30 * time.Second):
		e.t.Fatalf("worker %s not ready", id)
	}
	return p
}

func (p *proc) signal(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig)
	}
}

func (p *proc) wait(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(d):
		t.Fatalf("worker %s did not exit within %v", p.id, d)
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}

// waitAttempt waits until the journal shows the turn's attempt n with one
// of the phases (any phase when none given), and returns its worker.
func (e *env) waitAttempt(taskID string, n int, phases ...string) string {
	e.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		rec, err := e.journal.Get(context.Background(), taskID)
		if err == nil && len(rec.Attempts) >= n {
			a := rec.Attempts[n-1]
			if len(phases) == 0 {
				return a.Worker
			}
			for _, p := range a.Phases {
				for _, want := range phases {
					if p.Phase == want {
						return a.Worker
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	e.t.Fatalf("task %s: attempt %d never reached %v", taskID, n, phases)
	return ""
}

func TestProcessGracefulShutdownMidTurn(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	e := newEnv(t)
	a := e.spawnWorker("A")
	b := e.spawnWorker("B")
	agent := e.sim.CreateAgent("long", nil)
	c := e.conv("term")
	// The turn thinks (pings only) for 4s: well past the shutdown timeout.
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "t1",
		Text: fmt.Sprintf("[[sim think=%s answer=survived]] hello", simDur(4*time.Second))})
	holder := e.waitAttempt(res.TaskID, 1, "streaming")
	victim, survivor := a, b
	if holder == "B" {
		victim, survivor = b, a
	}
	t0 := time.Now()
	victim.signal(syscall.SIGTERM)
	victim.wait(t, 15*time.Second)
	t.Logf("worker %s exited %v after SIGTERM", victim.id, time.Since(t0).Round(time.Millisecond))
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer || final.Text != "survived" {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec := e.record(res.TaskID)
	e.settled()
	if n := countFinal(e.events(c, res.TaskID)); n != 1 {
		t.Fatalf("%d final events", n)
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
	if len(rec.Attempts) < 2 || rec.Attempts[0].Worker != victim.id || rec.Attempts[len(rec.Attempts)-1].Worker != survivor.id ||
		!strings.Contains(rec.Attempts[0].Error, "interrupted") {
		t.Fatalf("journal: %s", describeAttempts(rec))
	}
	t.Logf("answered %v after SIGTERM: %s", time.Since(t0).Round(time.Millisecond), describeAttempts(rec))
	// A graceful stop leaves the takeover registry: past the takeover time
	// (5s) nobody took the put-back turn over.
	time.Sleep(time.Until(t0.Add(8 * time.Second)))
	if ids := e.takeoverTasks(); len(ids) != 0 || rec.Attempts[len(rec.Attempts)-1].TakenOverFrom != "" {
		t.Fatalf("a stopped worker's turn was taken over: %v; %s", ids, describeAttempts(rec))
	}
}

func TestProcessKilledMidStreamAndMidContinuation(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for Asynq's lease recovery (~1-2 min)")
	}
	t.Parallel()
	e := newEnv(t)
	// B runs from the start but is paused (SIGSTOP) while A picks up the
	// turns, so that A holds both when it dies, whatever the machine's load.
	//
	// Under ordering (lease 2s here) the killed turn's conversation must be
	// free again within the lease, and a message queued behind it must
	// still wait until the killed turn is recovered and finished. The two
	// killed turns are in two conversations, so that A holds both.
	lease := envOrderLease + "=2s"
	b := e.spawnWorker("B", lease)
	b.signal(syscall.SIGSTOP)
	a := e.spawnWorker("A", lease)
	agent := e.sim.CreateAgent("kill", nil)
	agent2 := e.sim.CreateAgent("kill-cont", nil)
	c, c2 := e.conv("kill"), e.conv("kill-cont")
	// Mid-stream: a turn that streams (pings, then reasoning) for 5s.
	stream := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k-stream",
		Text: fmt.Sprintf("[[sim think=%s answer=stream-survived]] one", simDur(5*time.Second))})
	// Mid-continuation: the stream stalls at once and resume is refused,
	// so the attempt polls the run, which takes 5s.
	cont := e.enqueue(queue.Message{AgentID: agent2, Conversation: c2, MessageID: "k-cont",
		Text: fmt.Sprintf("[[sim think=%s answer=cont-survived stall=forever stall_after=1 resume=410]] two", simDur(5*time.Second))})
	e.waitAttempt(stream.TaskID, 1, "streaming")
	e.waitAttempt(cont.TaskID, 1, "continuing")
	// Behind the killed turn in its conversation.
	after := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k-after",
		Text: "[[sim answer=after-answered]] after"})
	if after.Position != 1 {
		t.Errorf("k-after: position %d, want 1", after.Position)
	}
	seq, err := ordering.New(e.rdb, ordering.Config{Prefix: e.prefix + "ord:"})
	if err != nil {
		t.Fatal(err)
	}
	key := ordering.ConversationKey(agent, c.Integration, c.ChatID)
	if held, _, _ := seq.Holder(context.Background(), key); held != stream.TaskID {
		t.Fatalf("the key is held by %q, want the streaming turn %s", held, stream.TaskID)
	}
	b.signal(syscall.SIGCONT) // running when A dies
	t0 := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	for {
		held, _, err := seq.Holder(context.Background(), key)
		if err != nil {
			t.Fatal(err)
		}
		if held == "" {
			t.Logf("the killed turn's conversation is free %v after SIGKILL (lease 2s)", time.Since(t0).Round(time.Millisecond))
			break
		}
		if time.Since(t0) > 3*time.Second {
			t.Fatalf("the key is still held by %s %v after SIGKILL (lease 2s)", held, time.Since(t0))
		}
		time.Sleep(20 * time.Millisecond)
	}
	// B takes the turns over ~5s after the kill (fast takeover). Asynq
	// recovers A's original tasks once their lease (30s, extended every 5s)
	// expired 30s ago, checking every minute from a server's start: C,
	// started now, checks at ~+62s; the originals then end at once, sending
	// nothing (settled, below, waits for that).
	time.Sleep(2 * time.Second)
	cw := e.spawnWorker("C") // its first recovery check after the start is at ~+62s
	for _, tc := range []struct {
		res    queue.EnqueueResult
		conv   record.Conversation
		answer string
	}{{stream, c, "stream-survived"}, {cont, c2, "cont-survived"}} {
		final, evs := e.waitFinal(tc.conv, tc.res.TaskID, 150*time.Second)
		if final.Type != record.EventAnswer || final.Text != tc.answer {
			t.Fatalf("final %+v; %s", final, summarize(evs))
		}
		rec := e.record(tc.res.TaskID)
		if n := e.sim.CountOtid(tc.res.Otid); n != 1 {
			t.Fatalf("otid stored %d times", n)
		}
		last := rec.Attempts[len(rec.Attempts)-1]
		if len(rec.Attempts) < 2 || rec.Attempts[0].Worker != "A" || last.Worker == "A" || rec.RunID == "" || last.SentOtid {
			t.Fatalf("journal: %s", describeAttempts(rec))
		}
		t.Logf("%s answered %v after SIGKILL: %s", tc.answer, time.Since(t0).Round(time.Millisecond), describeAttempts(rec))
	}
	if final, evs := e.waitFinal(c, after.TaskID, 30*time.Second); final.Type != record.EventAnswer || final.Text != "after-answered" {
		t.Fatalf("k-after: final %+v; %s", final, summarize(evs))
	}
	// Order held: the recovered turn reached the agent first and finished
	// before the next one started.
	if got := e.sim.UserMessages(agent); len(got) != 2 || got[0].Otid != stream.Otid || got[1].Otid != after.Otid {
		t.Fatalf("the agent received %+v, want k-stream then k-after", got)
	}
	checkSerialRuns(t, e.sim, agent, 2)
	e.settled()
	if n := countFinal(e.events(c, "")) + countFinal(e.events(c2, "")); n != 3 {
		t.Fatalf("%d final events", n)
	}
	// The originals, recovered by Asynq after the takeovers answered, ended
	// at once: nothing more reached the agent.
	if n := strings.Count(b.out.String()+cw.out.String(), "turn continued by another runner"); n != 2 {
		t.Errorf("%d recovered originals ended as taken over, want 2", n)
	}
	if n := e.sim.CountOtid(stream.Otid) + e.sim.CountOtid(cont.Otid); n != 2 {
		t.Errorf("%d messages of the killed turns at the simulator after Asynq's recovery, want 2", n)
	}
}
