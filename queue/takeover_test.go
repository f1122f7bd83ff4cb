package queue

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// takeoverEnv is a Redis with a key prefix and a queue of its own, and
// workers on it whose takeover registries the tests drive by hand.
type takeoverEnv struct {
	t      *testing.T
	rdb    *redis.Client
	opt    asynq.RedisClientOpt
	prefix string
	queue  string
	st     *store.Takeover
}

func newTakeoverEnv(t *testing.T) *takeoverEnv {
	srv := testredis.RequireReal(t)
	rdb := srv.Client(t)
	e := &takeoverEnv{t: t, rdb: rdb, opt: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB},
		prefix: "lettaq-tk-test:" + randomHex(t) + ":", queue: "lettaq-tk-" + randomHex(t)}
	e.st = store.NewTakeover(rdb, store.Keys{Prefix: e.prefix})
	t.Cleanup(func() {
		insp := asynq.NewInspector(e.opt)
		_ = insp.DeleteQueue(e.queue, true)
		_ = insp.Close()
		rdb.Del(context.Background(), shard.RecordKey(e.queue))
		keys, _ := rdb.Keys(context.Background(), e.prefix+"*").Result()
		if len(keys) > 0 {
			rdb.Del(context.Background(), keys...)
		}
	})
	return e
}

func randomHex(t *testing.T) string {
	return fmt.Sprintf("%x", rand.Uint64())
}

// worker makes a worker whose registry is ready to tick (not running).
func (e *takeoverEnv) worker(id string, after time.Duration) *Worker {
	e.t.Helper()
	w, err := NewWorker(WorkerConfig{Redis: e.opt, WorkerID: id, Letta: LettaConnection{URL: "http://127.0.0.1:1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Takeover: FastTakeover{After: after},
		Stores: WorkerStores{RepliesOptions: RepliesOptions{Prefix: e.prefix}, JournalOptions: JournalOptions{Prefix: e.prefix}},
		Queues: map[string]int{e.queue: 1}})
	if err != nil {
		e.t.Fatal(err)
	}
	w.tk.Open()
	e.t.Cleanup(func() { w.tk.Close(); w.closeRedis() })
	return w
}

// withReg gives tr its registration, its record writer and its completer,
// as newTurn does.
func withReg(tr *attempt.Pipeline) *attempt.Pipeline {
	return attempt.ForTest(tr, true)
}

// register registers tr as prepare does: the write goes with the attempt's
// next round trip.
func register(tr *attempt.Pipeline) {
	if op := tr.Tk.Register(claim.Entry{Key: tr.Line.Key(), Retried: tr.Retried, MaxRetry: tr.MaxRetry}, tr.Jr.Runner()); op != nil {
		tr.Progress.PushOp(op)
	}
}

// deadWorker registers a worker instance whose last beat is ago, running
// one turn (a real task in the queue) per id in turns.
func (e *takeoverEnv) deadWorker(instance string, ago time.Duration, turns ...string) {
	e.t.Helper()
	ctx := context.Background()
	// The score on Redis's clock.
	now, err := e.rdb.Time(ctx).Result()
	if err != nil {
		e.t.Fatal(err)
	}
	e.rdb.ZAdd(ctx, e.prefix+"takeover:workers", redis.Z{Score: float64(now.Add(-ago).UnixMilli()), Member: instance})
	c := asynq.NewClient(e.opt)
	defer c.Close()
	for _, id := range turns {
		b, _ := json.Marshal(map[string]any{"v": 1, "agent_id": "agent-1", "text": "hi",
			"conversation": map[string]string{"integration": "test", "chat_id": id}})
		if _, err := c.Enqueue(asynq.NewTask(TaskType, b), asynq.TaskID(id), asynq.Queue(e.queue), asynq.MaxRetry(5)); err != nil {
			e.t.Fatal(err)
		}
		entry, _ := json.Marshal(claim.Entry{Queue: e.queue, Runner: id, Retried: 2, MaxRetry: 5})
		if err := e.st.Register(ctx, store.Registration{Instance: instance, TaskID: id, Runner: id, Entry: entry,
			HolderTTL: time.Hour, LostTTL: time.Hour}); err != nil {
			e.t.Fatal(err)
		}
	}
}

func (e *takeoverEnv) takeoverTasks() []*asynq.TaskInfo {
	insp := asynq.NewInspector(e.opt)
	defer insp.Close()
	var out []*asynq.TaskInfo
	tasks, _ := insp.ListPendingTasks(e.queue)
	for _, ti := range tasks {
		if ti.Type == TakeoverTaskType {
			out = append(out, ti)
		}
	}
	return out
}

// Two watchers see one dead worker at once: exactly one claims it, and one
// takeover task per turn is made, with the turn's payload, no retry used,
// and the turn marked taken over.
func TestTakeoverTwoWatchersClaimOnce(t *testing.T) {
	e := newTakeoverEnv(t)
	a, b := e.worker("A", 2*time.Second), e.worker("B", 2*time.Second)
	a.tk.PrimeEligible()
	b.tk.PrimeEligible()
	e.deadWorker("D/1", 10*time.Second, "turn-1", "turn-2")
	var wg sync.WaitGroup
	for _, w := range []*Worker{a, b} {
		wg.Add(1)
		go func() { defer wg.Done(); w.tk.Tick(context.Background()) }()
	}
	wg.Wait()
	tasks := e.takeoverTasks()
	if len(tasks) != 2 {
		t.Fatalf("%d takeover tasks, want 2 (one per turn)", len(tasks))
	}
	for _, ti := range tasks {
		p, err := claim.DecodePayload(ti.Payload)
		if err != nil {
			t.Fatal(err)
		}
		if ti.ID != claim.TaskID("D/1", p.TaskID) || p.From != "D/1" || p.Retried != 2 || p.MaxRetry != 5 || ti.MaxRetry != 3 {
			t.Errorf("takeover %s: %+v (max retry %d)", ti.ID, p, ti.MaxRetry)
		}
		if m, err := DecodePayload(p.Payload); err != nil || m.Conversation.ChatID != p.TaskID {
			t.Errorf("takeover %s: the turn's payload is not carried: %v %+v", ti.ID, err, m)
		}
		if by, _ := e.st.TakenOverBy(context.Background(), p.TaskID); by != ti.ID {
			t.Errorf("turn %s marked taken over by %q, want %s", p.TaskID, by, ti.ID)
		}
	}
	if dead, _ := e.st.Tombstoned(context.Background(), "D/1"); !dead {
		t.Error("the dead worker has no tombstone")
	}
	if n := e.rdb.Exists(context.Background(), e.prefix+"takeover:turns:D/1").Val(); n != 0 {
		t.Error("the dead worker's turns hash is still there")
	}
	// Another round finds nobody to claim.
	a.tk.Tick(context.Background())
	if n := len(e.takeoverTasks()); n != 2 {
		t.Fatalf("%d takeover tasks after a second round", n)
	}
}

// A worker that beats is never claimed, however eager the watcher.
func TestTakeoverLiveWorkerNotClaimed(t *testing.T) {
	e := newTakeoverEnv(t)
	a, live := e.worker("A", 2*time.Second), e.worker("L", 2*time.Second)
	a.tk.PrimeEligible()
	live.tk.Tick(context.Background()) // a beat now
	e.st.Register(context.Background(), store.Registration{Instance: live.tk.Instance(), TaskID: "turn-live", Runner: "turn-live",
		Entry: []byte(`{"queue":"q","runner":"turn-live"}`), HolderTTL: time.Hour, LostTTL: time.Hour})
	a.tk.Tick(context.Background())
	if n := len(e.takeoverTasks()); n != 0 {
		t.Fatalf("%d takeover tasks of a live worker", n)
	}
	// The claim itself refuses a recent beat.
	if _, ok, err := e.st.Claim(context.Background(), live.tk.Instance(), "A", 2*time.Second, time.Hour); err != nil || ok {
		t.Fatalf("claim of a live worker: ok %v, err %v", ok, err)
	}
	if dead, _ := e.st.Tombstoned(context.Background(), live.tk.Instance()); dead {
		t.Fatal("a live worker was tombstoned")
	}
}

// A watcher that just came back (first beat, or after a gap in its own
// beats) judges nobody until its beats were good for TakeoverAfter.
func TestTakeoverWatcherJustBackNotEligible(t *testing.T) {
	e := newTakeoverEnv(t)
	a := e.worker("A", 2*time.Second)
	e.deadWorker("D/2", 10*time.Second, "turn-3")
	a.tk.Tick(context.Background()) // first beat: not eligible
	if n := len(e.takeoverTasks()); n != 0 {
		t.Fatalf("a watcher on its first beat took %d turns over", n)
	}
	// Eligible, then a gap in its own beats (it was paused): not eligible.
	a.tk.PrimeEligible()
	a.tk.LastTickAgo(2 * time.Second)
	a.tk.Tick(context.Background())
	if n := len(e.takeoverTasks()); n != 0 {
		t.Fatalf("a watcher back from a pause took %d turns over", n)
	}
	a.tk.PrimeEligible()
	a.tk.Tick(context.Background())
	if n := len(e.takeoverTasks()); n != 1 {
		t.Fatalf("an eligible watcher took %d turns over, want 1", n)
	}
}

// The original task of a taken-over turn, run again by Asynq (Retried >
// 0), ends; the takeover itself, and a first attempt, go on (a first
// attempt does not read the marker).
func TestTakeoverMarkerEndsOlderRunner(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	if err := e.st.MarkTakenOver(ctx, "turn-9", claim.TaskID("D/9", "turn-9"), time.Hour); err != nil {
		t.Fatal(err)
	}
	mk := func(runner string, retried int) *attempt.Pipeline {
		return withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: runner, Retried: retried}, Logger: w.log, ID: attempt.ID{TaskID: "turn-9"}})
	}
	if !mk("turn-9", 1).Tk.ContinuedElsewhere(ctx) {
		t.Error("the recovered original does not see the takeover")
	}
	if mk("turn-9", 0).Tk.ContinuedElsewhere(ctx) {
		t.Error("a first attempt read the marker")
	}
	if mk(claim.TaskID("D/9", "turn-9"), 1).Tk.ContinuedElsewhere(ctx) {
		t.Error("the takeover's own retry ends")
	}
	if !mk(claim.TaskID("D/8", "turn-9"), 1).Tk.ContinuedElsewhere(ctx) {
		t.Error("an older takeover goes on")
	}
}

// A turn whose worker's last good beat is old asks Redis before it writes:
// tombstoned, it stops (and every turn of that registration is fenced);
// not tombstoned, it goes on. With a fresh beat nothing is asked.
func TestTakeoverFencingStaleBeat(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	ep := w.tk.Instance()
	t1 := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Logger: w.log, ID: attempt.ID{TaskID: "turn-f1"}})
	t2 := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Logger: w.log, ID: attempt.ID{TaskID: "turn-f2"}})
	canceled := make(chan error, 1)
	t2.Rn.OnFence(func(err error) { canceled <- err })
	t1.Tk.AsRegistered(claim.Entry{}, 0)
	t2.Tk.AsRegistered(claim.Entry{}, 0)
	t1.Tk.BeatAgo(0) // fresh beat
	e.rdb.Set(ctx, e.prefix+"takeover:dead:"+ep, "B", time.Hour)
	if t1.Tk.TakenOver(ctx) {
		t.Fatal("a turn with a fresh beat asked Redis (or stopped)")
	}
	t1.Tk.BeatAgo(2 * time.Second) // paused past TakeoverAfter/2
	if !t1.Tk.TakenOver(ctx) {
		t.Fatal("a tombstoned worker with a stale beat goes on writing")
	}
	if !t2.Rn.IsFenced() || !t2.Tk.Tombstoned() || w.tk.Instance() == ep {
		t.Fatal("the other turns of the claimed registration are not fenced, or the worker did not re-register")
	}
	if err := <-canceled; err != errTakenOver {
		t.Fatalf("the fenced turn's context ended with %v", err)
	}
	// A stale beat without a tombstone: the turn goes on.
	t3 := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Logger: w.log, ID: attempt.ID{TaskID: "turn-f3"}})
	t3.Tk.AsRegistered(claim.Entry{}, 0)
	t3.Tk.BeatAgo(2 * time.Second)
	if t3.Tk.TakenOver(ctx) {
		t.Fatal("a worker that was not claimed stopped its turn")
	}
}

// A worker whose beat finds its tombstone fences its turns and goes on
// under a new instance id; a graceful stop takes it out of the registry.
func TestTakeoverBeatFindsTombstoneAndLeave(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	ep := w.tk.Instance()
	t1 := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Logger: w.log, ID: attempt.ID{TaskID: "turn-t1"}})
	t1.Tk.AsRegistered(claim.Entry{}, 0)
	e.rdb.Set(ctx, e.prefix+"takeover:dead:"+ep, "B", time.Hour)
	w.tk.Tick(ctx)
	if !t1.Rn.IsFenced() || w.tk.Instance() == ep {
		t.Fatal("the beat did not fence the claimed worker's turns")
	}
	w.tk.Tick(ctx)
	id := w.tk.Instance()
	if _, err := e.rdb.ZScore(ctx, e.prefix+"takeover:workers", id).Result(); err != nil {
		t.Fatalf("the new instance does not beat: %v", err)
	}
	w.tk.Leave()
	if _, err := e.rdb.ZScore(ctx, e.prefix+"takeover:workers", id).Result(); err != redis.Nil {
		t.Fatalf("a stopped worker is still registered: %v", err)
	}
}

// A Redis that lost the registry (a restart without persistence): the
// worker's next beat registers its running turns again, so that they can
// still be taken over.
func TestTakeoverRegistryLostRegistersAgain(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	w.tk.Tick(ctx)
	tr := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: "turn-r"}, Logger: w.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-r", Queue: e.queue}})
	tr.Progress = w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "r"}, func(error) {}, nil)
	register(tr)
	tr.Progress.Flush(ctx) // the registration goes with the attempt's next writes
	id := w.tk.Instance()
	turns := e.prefix + "takeover:turns:" + id
	if !e.rdb.HExists(ctx, turns, "turn-r").Val() {
		t.Fatal("the running turn is not registered")
	}
	e.rdb.Del(ctx, e.prefix+"takeover:workers", turns)
	w.tk.Tick(ctx)
	if !e.rdb.HExists(ctx, turns, "turn-r").Val() {
		t.Fatal("the beat after the registry was lost did not register the running turn again")
	}
	tr.Tk.Unregister()
	if e.rdb.HExists(ctx, turns, "turn-r").Val() {
		t.Fatal("an ended turn is still registered")
	}
}

// A turn whose last writes took it out of the registry, still in the
// worker's list of running turns when a beat finds the registry short of
// turns, is not written back for the instance's life: the beat does not
// register it again, and its end removes whatever a beat wrote back.
func TestTakeoverFinishedTurnNotRegisteredAgain(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	w.tk.Tick(ctx)
	tr := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: "turn-done"}, Logger: w.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-done", Queue: e.queue}})
	tr.Progress = w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "done"}, func(error) {}, nil)
	register(tr)
	tr.Progress.Flush(ctx)
	turns := e.prefix + "takeover:turns:" + w.tk.Instance()
	if !e.rdb.HExists(ctx, turns, "turn-done").Val() {
		t.Fatal("the running turn is not registered")
	}
	// Its last writes take it out; the beat comes before the attempt's end.
	if err := tr.Progress.Do(ctx, nil, tr.Tk.UnregisterOps()...); err != nil {
		t.Fatal(err)
	}
	w.tk.Tick(ctx)
	tr.Tk.Unregister()
	if e.rdb.HExists(ctx, turns, "turn-done").Val() {
		t.Fatal("a finished turn is registered again and stays for the instance's life")
	}
}

// reportObs records what an Observer hears of attempts and turns.
type reportObs struct {
	NopObserver
	mu       sync.Mutex
	attempts []string
	turns    []string
}

func (o *reportObs) AttemptFinished(_, result string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts = append(o.attempts, result)
}

func (o *reportObs) TurnFinished(_, outcome string, _, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.turns = append(o.turns, outcome)
}

// A worker paused between finish's look at its fence and the final write
// (its beat stale on resuming) whose turn was taken over and answered
// elsewhere: its writes are dropped, and it says so, in its log and to its
// Observer (attempt taken_over, no turn finished), instead of taking the
// answer the takeover wrote for its own.
func TestTakeoverFencedDeliveryReportsTakenOver(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	obs := &reportObs{}
	w.obs = obs
	c := &capture{}
	ctx := context.Background()
	ep := w.tk.Instance()
	id := "turn-fd"
	conv := record.Conversation{Integration: "test", ChatID: "fd-" + randomHex(t)}
	tr := &attempt.Pipeline{W: w.attempts, Rn: fence.Runner{ID: id}, Logger: slog.New(c), Actx: ctx, IDs: &attempt.IDs{TaskID: id, Otid: "otid-fd"}, ID: attempt.ID{TaskID: id, Otid: "otid-fd", Queue: e.queue, Start: time.Now(), Msg: Message{AgentID: "agent-1", Conversation: conv, MessageID: "m1"}}}
	tr.Obs.Observer = w.obs
	withReg(tr).Tk.AsRegistered(claim.Entry{}, 0)
	tr.Progress = w.writer.NewQueue(conv, tr.WriteFailed, nil)
	tr.Progress.SetFence(tr.Tk.FencedNow, errTakenOver)
	defer tr.Progress.Close()
	tr.Jr = attemptJournal(w, &record.TurnRecord{TaskID: id, Otid: "otid-fd", Conversation: conv,
		Attempts: []record.Attempt{{N: 1, Worker: "A", Start: tr.Start}}})
	attempt.ForTest(tr, false) // (with its queue and record)
	tr.Obs.TaskStarted(e.queue, 1, 0)
	// Meanwhile: B claimed A (its tombstone) and wrote the turn's answer
	// (the final event's marker); A's last good beat is old.
	e.rdb.Set(ctx, e.prefix+"answered:"+id, "1", time.Hour)
	e.rdb.Set(ctx, e.prefix+"takeover:dead:"+ep, "B", time.Hour)
	tr.Tk.BeatAgo(2 * time.Second)
	if err := tr.End.Deliver(ctx, tr.Logger, record.OutcomeAnswered, record.ReplyEvent{Type: record.EventAnswer, Text: "from A"}, "from A", nil); err != nil {
		t.Errorf("deliver: %v", err)
	}
	obs.mu.Lock()
	defer obs.mu.Unlock()
	if len(obs.turns) != 0 || len(obs.attempts) != 1 || obs.attempts[0] != "taken_over" {
		t.Errorf("the fenced attempt reported attempts %v, turns %v; want taken_over, no turn", obs.attempts, obs.turns)
	}
	var lines []string
	for _, l := range append(c.lines(slog.LevelInfo), c.lines(slog.LevelWarn)...) {
		lines = append(lines, l)
		if strings.Contains(l, "turn finished") || strings.Contains(l, "written though its write reported an error") {
			t.Errorf("the fenced attempt logged %q", l)
		}
	}
	if !slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, "turn taken over by another worker") }) {
		t.Errorf("the fenced attempt did not say it was taken over: %q", lines)
	}
	if n := e.rdb.XLen(ctx, e.prefix+"replies:test:"+conv.ChatID).Val(); n != 0 {
		t.Errorf("the fenced attempt wrote %d events", n)
	}
}

// The takeover component on its own: Start beats at once (the worker is in the registry
// before its first turn), Stop ends the beats and takes the worker out of the registry, and a
// second Stop does nothing.
func TestTakeoverStartBeatsStopLeaves(t *testing.T) {
	e := newTakeoverEnv(t)
	w, err := NewWorker(WorkerConfig{Redis: e.opt, WorkerID: "S", Letta: LettaConnection{URL: "http://127.0.0.1:1"},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Takeover: FastTakeover{After: 3 * time.Second},
		Stores: WorkerStores{RepliesOptions: RepliesOptions{Prefix: e.prefix}, JournalOptions: JournalOptions{Prefix: e.prefix}},
		Queues: map[string]int{e.queue: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.closeRedis)
	ctx := context.Background()
	if w.tk.Running() {
		t.Fatal("turns register before Start")
	}
	if err := w.tk.Start(ctx); err != nil {
		t.Fatal(err)
	}
	id := w.tk.Instance()
	deadline := time.Now().Add(5 * time.Second)
	for e.rdb.ZScore(ctx, e.prefix+"takeover:workers", id).Err() != nil {
		if time.Now().After(deadline) {
			t.Fatal("no beat 5 s after Start")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !w.tk.Running() {
		t.Error("turns do not register after Start")
	}
	w.tk.Stop()
	w.tk.Stop()
	if w.tk.Running() {
		t.Error("turns still register after Stop")
	}
	if err := e.rdb.ZScore(ctx, e.prefix+"takeover:workers", id).Err(); err != redis.Nil {
		t.Errorf("a stopped worker is still registered: %v", err)
	}
}
