package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	mrand "math/rand"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// stopEvent is a worker stopped by the schedule: which, how, when.
type stopEvent struct {
	worker string
	sig    syscall.Signal
	at     time.Time
}

// run is one chaos run in progress.
type run struct {
	cfg     Config
	log     io.Writer
	bin     string
	env     []string
	rs      *testredis.Persistent
	sim     *lettasim.Server
	rdb     *redis.Client
	client  *queue.Client
	replies *queue.Replies
	journal *queue.Journal
	insp    *asynq.Inspector
	queue   string
	rnd     *mrand.Rand

	mu      sync.Mutex
	workers []*workerProc // every worker started, in order
	nextID  int
	stops   []stopEvent
	report  Report
}

// Run runs the chaos run cfg describes and reports what it found. Progress
// goes to log. An error means the run itself could not be made (no
// redis-server, a worker that would not start), not that turns were lost.
func Run(ctx context.Context, cfg Config, log io.Writer) (*Report, error) {
	start := time.Now()
	bin, err := os.Executable()
	if err != nil {
		return nil, err
	}
	if cfg.Dir == "" {
		if cfg.Dir, err = os.MkdirTemp("", "lettaq-chaos-"); err != nil {
			return nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(cfg.Dir, "redis"), 0o755); err != nil {
		return nil, err
	}
	rs, err := testredis.StartPersistentIn(cfg.RedisServer, filepath.Join(cfg.Dir, "redis"))
	if err != nil {
		return nil, err
	}
	defer rs.Close()
	sim := lettasim.NewServer(lettasim.Config{PingInterval: simPing, TimeScale: simScale})
	defer sim.Close()
	tag := randHex(4)
	r := &run{cfg: cfg, log: log, bin: bin, rs: rs, sim: sim, queue: "chaos-" + tag, rnd: mrand.New(mrand.NewSource(cfg.Seed))}
	prefix := "chaos:" + tag + ":"
	r.env = []string{envRedis + "=" + rs.Addr, envPrefix + "=" + prefix, envQueue + "=" + r.queue, envLetta + "=" + sim.URL,
		envTakeover + "=" + cfg.TakeoverAfter.String()}
	r.rdb = redis.NewClient(&redis.Options{Addr: rs.Addr})
	defer r.rdb.Close()
	r.replies = queue.NewReplies(r.rdb, queue.RepliesOptions{Prefix: prefix})
	r.journal = queue.NewJournal(r.rdb, queue.JournalOptions{Prefix: prefix})
	conn := asynq.RedisClientOpt{Addr: rs.Addr}
	r.client, err = queue.NewClient(queue.ClientConfig{Redis: conn, Budget: chaosBudget(), Queue: r.queue, Replies: r.replies,
		Ordering: queue.Ordering{Config: ordering.Config{Prefix: queue.OrderingPrefix(prefix)}}})
	if err != nil {
		return nil, err
	}
	defer r.client.Close()
	r.insp = asynq.NewInspector(conn)
	defer r.insp.Close()
	r.report.Config = cfg
	fmt.Fprintf(log, "chaos: redis-server %s (appendonly, dir %s), simulator %s, logs in %s\n", rs.Addr, rs.Dir, sim.URL, cfg.Dir)

	defer r.stopAll()
	for range cfg.Workers {
		if _, err := r.spawn(); err != nil {
			return nil, err
		}
	}
	chats := planTurns(r.rnd, cfg.Chats, cfg.Messages, cfg.Duration, simScale)
	for _, chat := range chats {
		agent := sim.CreateAgent(fmt.Sprintf("chaos-chat-%d", chat[0].Chat), nil)
		conv := record.Conversation{Integration: "chaos", ChatID: fmt.Sprintf("chat-%d-%s", chat[0].Chat, tag)}
		for _, t := range chat {
			t.Agent, t.Conv = agent, conv
		}
	}

	t0 := time.Now()
	var wg sync.WaitGroup
	for _, chat := range chats {
		wg.Add(1)
		go func() { defer wg.Done(); r.enqueueChat(ctx, t0, chat) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.runSchedule(ctx, t0) }()
	wg.Wait()
	fmt.Fprintf(log, "chaos: all enqueued and the schedule done at +%v; waiting up to %v for every turn\n", time.Since(t0).Round(time.Second), cfg.Wait)

	var all []*Turn
	for _, chat := range chats {
		all = append(all, chat...)
	}
	r.waitTurns(ctx, all, time.Now().Add(cfg.Wait))
	r.report.Settled = r.waitSettled(ctx, time.Now().Add(cfg.Settle))
	r.stopAll()
	r.count(ctx, chats)
	r.report.Elapsed = time.Since(start)
	return &r.report, nil
}

// spawn starts a new worker (w1, w2, ...).
func (r *run) spawn() (*workerProc, error) {
	r.mu.Lock()
	r.nextID++
	id := fmt.Sprintf("w%d", r.nextID)
	r.mu.Unlock()
	p, err := startWorker(r.bin, r.env, id, r.cfg.Dir)
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.workers = append(r.workers, p)
	r.mu.Unlock()
	fmt.Fprintf(r.log, "chaos: worker %s started (pid %d)\n", id, p.cmd.Process.Pid)
	return p, nil
}

func (r *run) stopAll() {
	r.mu.Lock()
	ws := append([]*workerProc(nil), r.workers...)
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, p := range ws {
		if p.alive() {
			wg.Add(1)
			go func() { defer wg.Done(); _ = p.stop(context.Background(), 15*time.Second) }()
		}
	}
	wg.Wait()
}

// enqueueChat enqueues one chat's messages in their order, each at its
// time; an enqueue that fails (Redis down) is tried again with the same
// message id, which Enqueue makes idempotent.
func (r *run) enqueueChat(ctx context.Context, t0 time.Time, chat []*Turn) {
	for _, t := range chat {
		if !sleepUntil(ctx, t0.Add(t.At)) {
			return
		}
		for {
			res, err := r.client.Enqueue(ctx, queue.Message{AgentID: t.Agent, Conversation: t.Conv, MessageID: t.Name(), Text: t.Text})
			if err == nil {
				t.Res = res
				break
			}
			fmt.Fprintf(r.log, "chaos: enqueue %s: %v (trying again)\n", t.Name(), err)
			if !sleepUntil(ctx, time.Now().Add(500*time.Millisecond)) {
				return
			}
		}
	}
}

func (r *run) runSchedule(ctx context.Context, t0 time.Time) {
	for _, a := range r.cfg.Schedule {
		if !sleepUntil(ctx, t0.Add(a.At)) {
			return
		}
		var err error
		switch a.Kind {
		case KillWorker:
			err = r.stopWorker(ctx, syscall.SIGKILL)
		case TermWorker:
			err = r.stopWorker(ctx, syscall.SIGTERM)
		case RestartRedis:
			err = r.restartRedis(ctx)
		}
		if err != nil {
			fmt.Fprintf(r.log, "chaos: %s: %v\n", a, err)
			r.mu.Lock()
			r.report.ActionErrors = append(r.report.ActionErrors, fmt.Sprintf("%s: %v", a, err))
			r.mu.Unlock()
		}
	}
}

// stopWorker sends sig to the busiest live worker (the one running most
// turns, by the journal), waits for it to exit and starts a replacement.
func (r *run) stopWorker(ctx context.Context, sig syscall.Signal) error {
	victim := r.busiest(ctx)
	if victim == nil {
		return fmt.Errorf("no live worker")
	}
	at := time.Now()
	victim.signal(sig)
	name := map[syscall.Signal]string{syscall.SIGKILL: "SIGKILL", syscall.SIGTERM: "SIGTERM"}[sig]
	victim.fate.Store(name)
	r.mu.Lock()
	r.stops = append(r.stops, stopEvent{worker: victim.id, sig: sig, at: at})
	if sig == syscall.SIGKILL {
		r.report.Kills++
	} else {
		r.report.Terms++
	}
	r.mu.Unlock()
	var err error
	select {
	case <-victim.done:
	case <-time.After(30 * time.Second):
		victim.signal(syscall.SIGKILL)
		<-victim.done
		err = fmt.Errorf("worker %s did not exit within 30s of %s", victim.id, name)
	}
	fmt.Fprintf(r.log, "chaos: %s worker %s; it exited %v later\n", name, victim.id, time.Since(at).Round(time.Millisecond))
	if _, serr := r.spawn(); serr != nil && err == nil {
		err = serr
	}
	return err
}

// busiest returns the live worker whose attempts are running the most
// turns, by the journal (the first live one when none runs any).
func (r *run) busiest(ctx context.Context) *workerProc {
	r.mu.Lock()
	var live []*workerProc
	for _, p := range r.workers {
		if p.alive() {
			live = append(live, p)
		}
	}
	r.mu.Unlock()
	if len(live) == 0 {
		return nil
	}
	// A worker running nothing is a poor victim: wait a little for one
	// that runs a turn.
	var running map[string]int
	best := live[0]
	for deadline := time.Now().Add(busyWait); ; {
		running = r.running(ctx)
		for _, p := range live[1:] {
			if running[p.id] > running[best.id] {
				best = p
			}
		}
		if running[best.id] > 0 || time.Now().After(deadline) || !sleepUntil(ctx, time.Now().Add(100*time.Millisecond)) {
			break
		}
	}
	fmt.Fprintf(r.log, "chaos: turns running per worker %v: the victim is %s\n", running, best.id)
	return best
}

// busyWait bounds how long a stop waits for a worker that runs a turn.
const busyWait = 10 * time.Second

// running counts, by the journal, the turns each worker's attempts are
// running now.
func (r *run) running(ctx context.Context) map[string]int {
	running := map[string]int{}
	recs, err := r.journal.Recent(ctx, queue.FilterAll, 10000)
	if err != nil {
		return running
	}
	for _, rec := range recs {
		if finalOutcome(rec.Outcome) || len(rec.Attempts) == 0 {
			continue
		}
		if a := rec.Attempts[len(rec.Attempts)-1]; a.End.IsZero() {
			running[a.Worker]++
		}
	}
	return running
}

func (r *run) restartRedis(ctx context.Context) error {
	at := time.Now()
	if err := r.rs.Stop(); err != nil {
		return err
	}
	sleepUntil(ctx, time.Now().Add(r.cfg.Outage))
	if err := r.rs.Start(); err != nil {
		return err
	}
	r.mu.Lock()
	r.report.RedisRestarts++
	r.mu.Unlock()
	fmt.Fprintf(r.log, "chaos: Redis stopped and started again (down %v)\n", time.Since(at).Round(time.Millisecond))
	return nil
}

// turnEnd is what the reply stream and the journal say about a turn.
type turnEnd struct {
	final   *record.ReplyEvent // the final event, nil when none
	outcome string             // the journal's final outcome, "" when none
	cause   string             // the journal's error
	rec     *record.TurnRecord
}

func (e turnEnd) done() bool { return e.final != nil || e.outcome != "" }

// end reads what is known of t's end (errors, e.g. Redis down, read as
// nothing known yet).
func (r *run) end(ctx context.Context, t *Turn, evs []record.ReplyEvent) turnEnd {
	var e turnEnd
	if t.Res.TaskID == "" {
		return e
	}
	for i := range evs {
		ev := &evs[i]
		if ev.TaskID == t.Res.TaskID && ev.Type.Final() && (ev.Type != record.EventError || ev.Permanent) {
			e.final = ev
			break
		}
	}
	if rec, err := r.journal.Get(ctx, t.Res.TaskID); err == nil {
		e.rec = rec
		if finalOutcome(rec.Outcome) {
			e.outcome, e.cause = rec.Outcome, rec.Error
		}
	}
	return e
}

// waitTurns waits until every turn has ended, or the deadline.
func (r *run) waitTurns(ctx context.Context, turns []*Turn, deadline time.Time) {
	for {
		open := 0
		byConv := map[record.Conversation][]record.ReplyEvent{}
		for _, t := range turns {
			evs, ok := byConv[t.Conv]
			if !ok {
				evs, _, _ = r.replies.Read(ctx, t.Conv, "0", 0, 0)
				byConv[t.Conv] = evs
			}
			if !r.end(ctx, t, evs).done() {
				open++
			}
		}
		if open == 0 {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			fmt.Fprintf(r.log, "chaos: %d turns still open at the deadline\n", open)
			return
		}
		sleepUntil(ctx, time.Now().Add(time.Second))
	}
}

// waitSettled waits until the queue holds nothing Asynq could still run.
func (r *run) waitSettled(ctx context.Context, deadline time.Time) bool {
	for {
		qi, err := r.insp.GetQueueInfo(r.queue)
		if err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry+qi.Aggregating == 0 {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if err == nil {
				fmt.Fprintf(r.log, "chaos: queue not settled: %d pending, %d active, %d scheduled, %d retry\n", qi.Pending, qi.Active, qi.Scheduled, qi.Retry)
			}
			return false
		}
		sleepUntil(ctx, time.Now().Add(200*time.Millisecond))
	}
}

// count fills the report from the reply streams, the journal and the
// simulator.
func (r *run) count(ctx context.Context, chats [][]*Turn) {
	rep := &r.report
	rep.Failed = map[string]int{}
	perOtid := map[string]int{}
	var takeovers, putbacks []time.Duration
	for _, chat := range chats {
		evs, _, _ := r.replies.Read(ctx, chat[0].Conv, "0", 0, 0)
		numberOf := map[string]int{}
		for _, t := range chat {
			if t.Res.TaskID == "" {
				rep.Lost = append(rep.Lost, t.Name()+" (never enqueued)")
				continue
			}
			rep.Enqueued++
			numberOf[t.Res.Otid] = t.N
			perOtid[t.Res.Otid] = r.sim.CountOtid(t.Res.Otid)
			if perOtid[t.Res.Otid] == 0 {
				rep.Missing++
			}
			e := r.end(ctx, t, evs)
			switch {
			case !e.done():
				rep.Lost = append(rep.Lost, t.Name())
			case e.final != nil && e.final.Type == record.EventAnswer:
				rep.Answered++
			case e.final != nil:
				rep.Failed[string(e.final.Type)+": "+e.final.Text]++
			case e.outcome == record.OutcomeAnswered:
				rep.Lost = append(rep.Lost, t.Name()+" (answered in the journal, no answer event)")
			default:
				rep.Failed[e.outcome+": "+e.cause]++
			}
			if e.rec != nil {
				spans := make([]AttemptSpan, len(e.rec.Attempts))
				continued := false
				for i, a := range e.rec.Attempts {
					spans[i] = AttemptSpan{Worker: a.Worker, Start: a.Start, End: a.End}
					continued = continued || a.Resumes > 0 || a.Polls > 0
				}
				if continued {
					rep.Continued++
				}
				for _, s := range r.stops {
					if d, ok := Takeover(spans, s.worker, s.at); ok {
						if s.sig == syscall.SIGKILL {
							takeovers = append(takeovers, d)
						} else {
							putbacks = append(putbacks, d)
						}
					}
				}
			}
		}
		var arrivals []int
		for _, m := range r.sim.UserMessages(chat[0].Agent) {
			if n, ok := numberOf[m.Otid]; ok {
				arrivals = append(arrivals, n)
			}
		}
		if v := OrderViolations(arrivals); v > 0 {
			rep.OrderViolations += v
			rep.ChatsOutOfOrder++
			fmt.Fprintf(r.log, "chaos: chat %d reached the agent in the order %v\n", chat[0].Chat, arrivals)
		}
	}
	rep.MaxPerOtid, rep.Duplicated = DuplicateStats(perOtid)
	rep.Takeover, rep.PutBack = SpreadOf(takeovers), SpreadOf(putbacks)
	for _, p := range r.workers {
		rep.Workers = append(rep.Workers, WorkerReport{ID: p.id, PeakRSS: p.peak.Load(), Fate: p.fate.Load().(string)})
	}
}

// sleepUntil sleeps until t; false when ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
