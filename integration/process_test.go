package integration

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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
	"github.com/lettaq/lettaq/queue"
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
	db := 0
	fmt.Sscan(os.Getenv(envRedisDB), &db)
	b := testBudget()
	lc, err := agentclient.New(agentclient.Config{BaseURL: os.Getenv(envLetta), RequestTimeout: b.RequestTimeout})
	if err != nil {
		log.Error("letta client", "error", err)
		return 2
	}
	prefix := os.Getenv(envPrefix)
	w, err := queue.NewWorker(queue.WorkerConfig{
		Redis: asynq.RedisClientOpt{Addr: os.Getenv(envRedis), DB: db}, Letta: lc, Budget: b, Concurrency: 50,
		Queues: map[string]int{os.Getenv(envQueue): 1}, ShutdownTimeout: 2 * time.Second, Logger: log,
		WorkerID:          os.Getenv(envID),
		RepliesOptions:    queue.RepliesOptions{Prefix: prefix},
		JournalOptions:    queue.JournalOptions{Prefix: prefix, Retention: time.Hour},
		HeartbeatInterval: 200 * time.Millisecond, DeltaMaxAge: 100 * time.Millisecond,
		StuckRetryDelay: 200 * time.Millisecond, DelayedTaskCheckInterval: 200 * time.Millisecond,
		TaskCheckInterval: 50 * time.Millisecond,
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

// proc is a worker child process.
type proc struct {
	id   string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
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

// spawnWorker starts a worker process and waits until it runs.
func (e *env) spawnWorker(id string) *proc {
	e.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=1", envRedis+"="+e.redis.Addr, fmt.Sprintf("%s=%d", envRedisDB, e.redis.DB),
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
	if final.Type != queue.EventAnswer || final.Text != "survived" {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec := e.record(res.TaskID)
	time.Sleep(300 * time.Millisecond)
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
}

func TestProcessKilledMidStreamAndMidContinuation(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for Asynq's lease recovery (~1-2 min)")
	}
	t.Parallel()
	e := newEnv(t)
	// B runs from the start but is paused (SIGSTOP) while A picks up the
	// turns, so that A holds both when it dies, whatever the machine's load.
	b := e.spawnWorker("B")
	b.signal(syscall.SIGSTOP)
	a := e.spawnWorker("A")
	agent := e.sim.CreateAgent("kill", nil)
	c := e.conv("kill")
	// Mid-stream: a turn that streams (pings, then reasoning) for 5s.
	stream := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k-stream",
		Text: fmt.Sprintf("[[sim think=%s answer=stream-survived]] one", simDur(5*time.Second))})
	// Mid-continuation: the stream stalls at once and resume is refused,
	// so the attempt polls the run, which takes 5s.
	cont := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k-cont",
		Text: fmt.Sprintf("[[sim think=%s answer=cont-survived stall=forever stall_after=1 resume=410]] two", simDur(5*time.Second))})
	e.waitAttempt(stream.TaskID, 1, "streaming")
	e.waitAttempt(cont.TaskID, 1, "continuing")
	b.signal(syscall.SIGCONT) // running when A dies
	t0 := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	// Asynq recovers a task once its lease (30s, extended every 5s) expired
	// 30s ago, checking every minute from a server's start: a worker that
	// starts now checks at ~+62s.
	time.Sleep(2 * time.Second)
	e.spawnWorker("C") // its first recovery check after the start is at ~+62s
	for _, tc := range []struct {
		res    queue.EnqueueResult
		answer string
	}{{stream, "stream-survived"}, {cont, "cont-survived"}} {
		final, evs := e.waitFinal(c, tc.res.TaskID, 150*time.Second)
		if final.Type != queue.EventAnswer || final.Text != tc.answer {
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
	time.Sleep(300 * time.Millisecond)
	if n := countFinal(e.events(c, "")); n != 2 {
		t.Fatalf("%d final events", n)
	}
}
