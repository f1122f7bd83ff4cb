package integration

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/testbudget"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// simScale multiplies every scripted delay and fault duration of the
// simulator; use simDur to give a fault a real duration.
const simScale = 0.01

// simDur converts a real duration into the simulator's scripted time.
func simDur(d time.Duration) time.Duration { return time.Duration(float64(d) / simScale) }

// testBudget is the short-clock budget of the tests and the chaos run (testbudget.Short).
func testBudget() budget.Config { return testbudget.Short() }

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("LETTAQ_TEST_LOG") == "1" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// env is one test's world: a Redis (shared, with a queue and key prefix of
// its own), a simulator, a client, and the reading side of replies and
// journal.
type env struct {
	t       testing.TB
	redis   *testredis.Server
	rdb     *redis.Client
	queue   string
	prefix  string
	sim     *lettasim.Server
	budget  budget.Config
	client  *queue.Client
	replies *queue.Replies
	journal *queue.Journal
	insp    *asynq.Inspector
	scope   ordering.Scope // ordering scope; "" is the conversation
	// unordered: the client and workers run without ordering (withoutOrdering).
	unordered bool
	// threadMode of the workers; "" is queue.ThreadAgent (the tests
	// written for the agent endpoints), withThreadMode sets another.
	threadMode queue.ThreadMode
	// lettaURL, when set, is where the workers reach Letta instead of the
	// simulator's own URL (a front that rewrites some answers).
	lettaURL string
	// shards of the client and the workers (withShards; 0: one).
	shards int
}

// withShards spreads the env's chats over n shards (client and workers).
func withShards(n int) envOpt { return func(e *env, _ *lettasim.Config) { e.shards = n } }

// withoutOrdering turns ordering off for the client and the workers (they must agree: a client
// under ordering enqueues a turn queued behind another as a scheduled task that only a worker
// under ordering wakes).
func withoutOrdering() envOpt { return func(e *env, _ *lettasim.Config) { e.unordered = true } }

// withThreadMode sets the workers' thread mode.
func withThreadMode(m queue.ThreadMode) envOpt {
	return func(e *env, _ *lettasim.Config) { e.threadMode = m }
}

func (e *env) mode() queue.ThreadMode {
	if e.threadMode == "" {
		return queue.ThreadAgent
	}
	return e.threadMode
}

type envOpt func(*env, *lettasim.Config)

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	e := &env{t: t, queue: "lettaq-test-" + randHex(6), budget: testBudget()}
	e.prefix = "lettaq-test:" + e.queue + ":"
	simCfg := lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: simScale}
	for _, o := range opts {
		o(e, &simCfg)
	}
	if e.redis == nil {
		e.redis = testredis.RequireReal(t)
	}
	srv := e.redis
	e.sim = lettasim.NewServer(simCfg)
	t.Cleanup(e.sim.Close)
	e.rdb = srv.Client(t)
	e.replies = queue.NewReplies(e.rdb, queue.RepliesOptions{Prefix: e.prefix, Shards: e.layout()})
	e.journal = queue.NewJournal(e.rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour, Shards: e.layout()})
	c, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue, Shards: e.shards,
		Retention: time.Hour, Replies: e.replies, Ordering: e.ordering()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	e.client = c
	e.insp = asynq.NewInspector(e.redisOpt())
	t.Cleanup(func() {
		for _, q := range e.queues() {
			_ = e.insp.DeleteQueue(q, true)
		}
		_ = e.insp.Close()
		_ = e.rdb.Del(context.Background(), shard.RecordKey(e.queue)).Err()
		e.cleanKeys()
	})
	return e
}

func withBudget(f func(*budget.Config)) envOpt {
	return func(e *env, _ *lettasim.Config) { f(&e.budget) }
}

// withRedis puts the env on srv instead of the shared Redis.
func withRedis(srv *testredis.Server) envOpt {
	return func(e *env, _ *lettasim.Config) { e.redis = srv }
}

func withSim(f func(*lettasim.Config)) envOpt { return func(_ *env, c *lettasim.Config) { f(c) } }

func (e *env) redisOpt() asynq.RedisClientOpt {
	return asynq.RedisClientOpt{Addr: e.redis.Addr, DB: e.redis.DB}
}

// cleanKeys deletes this test's reply and journal keys (nothing else).
func (e *env) cleanKeys() {
	ctx := context.Background()
	iter := e.rdb.Scan(ctx, 0, e.prefix+"*", 500).Iterator()
	var keys []string
	for iter.Next(ctx) {
		keys = append(keys, iter.Val())
	}
	for i := 0; i < len(keys); i += 200 {
		_ = e.rdb.Del(ctx, keys[i:min(i+200, len(keys))]...).Err()
	}
}

// ordering is the test's ordering configuration: keys under its prefix.
func (e *env) ordering() queue.Ordering {
	return queue.Ordering{Off: e.unordered, Scope: e.scope, Config: ordering.Config{Prefix: e.prefix + "ord:"}}
}

func (e *env) workerConfig(id string) queue.WorkerConfig {
	url := e.sim.URL
	if e.lettaURL != "" {
		url = e.lettaURL
	}
	lc, err := agentclient.New(agentclient.Config{BaseURL: url, RequestTimeout: e.budget.RequestTimeout})
	if err != nil {
		e.t.Fatal(err)
	}
	return queue.WorkerConfig{
		Redis: e.redisOpt(), Letta: queue.LettaConnection{Client: lc}, Budget: e.budget, Concurrency: 50,
		Queues: map[string]int{e.queue: 1}, Shards: e.shards, ShutdownTimeout: 3 * time.Second,
		Logger: testLogger(e.t).With("worker", id), WorkerID: id,
		Stores: queue.WorkerStores{
			RepliesOptions: queue.RepliesOptions{Prefix: e.prefix},
			JournalOptions: queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour},
		},
		Timing: queue.WorkerTiming{
			HeartbeatInterval: 200 * time.Millisecond, DeltaMaxAge: 100 * time.Millisecond,
			StuckRetryDelay: 200 * time.Millisecond, DelayedTaskCheckInterval: 200 * time.Millisecond,
			TaskCheckInterval: 50 * time.Millisecond,
		},
		Ordering:   e.ordering(),
		ThreadMode: e.mode(),
	}
}

// startWorker runs an in-process worker until the test ends (or stop).
func (e *env) startWorker(id string, mods ...func(*queue.WorkerConfig)) (stop func()) {
	e.t.Helper()
	cfg := e.workerConfig(id)
	for _, m := range mods {
		m(&cfg)
	}
	w, err := queue.NewWorker(cfg)
	if err != nil {
		e.t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					e.t.Errorf("worker %s: %v", id, err)
				}
			case <-time.After(30 * time.Second):
				e.t.Errorf("worker %s did not stop", id)
			}
		})
	}
	e.t.Cleanup(stop)
	return stop
}

// queues are the env's Asynq queues: its queue, or its shards'.
func (e *env) queues() []string { return e.layout().Queues() }

// layout is the env's shards (one unless withShards).
func (e *env) layout() shard.Layout {
	l, err := shard.New(max(e.shards, 1), e.queue, e.prefix)
	if err != nil {
		e.t.Fatal(err)
	}
	return l
}

func (e *env) conv(name string) record.Conversation {
	return record.Conversation{Integration: "test", ChatID: name + "-" + randHex(3)}
}

func (e *env) enqueue(m queue.Message) queue.EnqueueResult {
	e.t.Helper()
	res, err := e.client.Enqueue(context.Background(), m)
	if err != nil {
		e.t.Fatalf("enqueue: %v", err)
	}
	return res
}

// waitFinal reads c's reply stream until the final event of taskID
// arrives, and returns all events of that task read so far.
func (e *env) waitFinal(c record.Conversation, taskID string, timeout time.Duration) (final record.ReplyEvent, evs []record.ReplyEvent) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	last := "0"
	for ctx.Err() == nil {
		got, next, err := e.replies.Read(ctx, c, last, 100, 200*time.Millisecond)
		if err != nil && ctx.Err() == nil {
			e.t.Fatalf("read replies: %v", err)
		}
		last = next
		for _, ev := range got {
			if ev.TaskID != taskID {
				continue
			}
			evs = append(evs, ev)
			if ev.Type.Final() && (ev.Type != record.EventError || ev.Permanent) {
				return ev, evs
			}
		}
	}
	e.t.Fatalf("no final event for task %s within %v; events: %s", taskID, timeout, summarize(evs))
	return
}

// events returns every event of c's stream (of taskID, or all when "").
func (e *env) events(c record.Conversation, taskID string) []record.ReplyEvent {
	e.t.Helper()
	got, _, err := e.replies.Read(context.Background(), c, "0", 0, 0)
	if err != nil {
		e.t.Fatal(err)
	}
	var out []record.ReplyEvent
	for _, ev := range got {
		if taskID == "" || ev.TaskID == taskID {
			out = append(out, ev)
		}
	}
	return out
}

func countFinal(evs []record.ReplyEvent) int {
	n := 0
	for _, ev := range evs {
		if ev.Type == record.EventAnswer || ev.Type == record.EventApprovalRequired || (ev.Type == record.EventError && ev.Permanent) {
			n++
		}
	}
	return n
}

func summarize(evs []record.ReplyEvent) string {
	var b strings.Builder
	for _, ev := range evs {
		fmt.Fprintf(&b, "[%d %s", ev.Seq, ev.Type)
		switch {
		case ev.Phase != "":
			fmt.Fprintf(&b, " %s", ev.Phase)
		case ev.Tool != nil:
			fmt.Fprintf(&b, " %s/%s", ev.Tool.Name, ev.Tool.Status)
		case ev.Text != "":
			s := ev.Text
			if len(s) > 40 {
				s = s[:40] + "…"
			}
			fmt.Fprintf(&b, " %q", s)
		}
		b.WriteString("] ")
	}
	return b.String()
}

// settled waits until the test's queue holds no task that Asynq could still
// run (nothing pending, active, scheduled, retrying or aggregating). After
// that no attempt is left to write a late event, so a count of final events
// is final: the signal for "no second answer", instead of a sleep.
func (e *env) settled() {
	e.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		qi, err := e.insp.GetQueueInfo(e.queue)
		if err == nil && qi.Pending+qi.Active+qi.Scheduled-e.scheduledExpiries(qi.Scheduled)+qi.Retry+qi.Aggregating == 0 {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("queue %s did not settle: %+v (err %v)", e.queue, qi, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// scheduledExpiries counts the scheduled tasks that are the expiries of
// unanswered approval requests (answer:…, due in LETTAQ_APPROVAL_TIMEOUT):
// they write no event of the turns a test counts.
func (e *env) scheduledExpiries(scheduled int) int {
	if scheduled == 0 {
		return 0
	}
	tasks, err := e.insp.ListScheduledTasks(e.queue, asynq.PageSize(1000))
	if err != nil {
		return 0
	}
	n := 0
	for _, ti := range tasks {
		if m, err := queue.DecodePayload(ti.Payload); err == nil && m.IsApprovalExpiry() {
			n++
		}
	}
	return n
}

// record waits for the journal to show the turn finished, and returns it.
func (e *env) record(taskID string) *record.TurnRecord {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rec, err := e.journal.Get(context.Background(), taskID)
		if err == nil && rec.Outcome != "" {
			return rec
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("journal of %s: no outcome (rec=%+v, err=%v)", taskID, rec, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func describeAttempts(rec *record.TurnRecord) string {
	var b strings.Builder
	for _, a := range rec.Attempts {
		var ph []string
		for _, p := range a.Phases {
			ph = append(ph, p.Phase)
		}
		fmt.Fprintf(&b, "#%d %s clock=%q polls=%d resumes=%d resend=%q outcome=%s err=%q phases=%v; ",
			a.N, a.Worker, a.TimeoutClock, a.Polls, a.Resumes, a.ResendDecision, a.Outcome, a.Error, ph)
	}
	return b.String()
}
