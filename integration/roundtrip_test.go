package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/redisopt"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// hookedOpt makes the worker's clients (redisopt.Lean) with hook added.
type hookedOpt struct {
	asynq.RedisClientOpt
	hook redis.Hook
}

func (o hookedOpt) MakeRedisClient() any {
	c := redisopt.Lean(o.RedisClientOpt).MakeRedisClient().(*redis.Client)
	c.AddHook(o.hook)
	return c
}

// pipelineHook is a redis.Hook that sees pipelines only.
type pipelineHook func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook

func (h pipelineHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h pipelineHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h(next)
}

// tripRecorder is a hook that records what each pipeline (and each command sent alone)
// carries: command names, and the first key of each.
type tripRecorder struct {
	mu       sync.Mutex
	trips    [][]string // per round trip: "name key" of each command
	noScript bool       // a script was answered NOSCRIPT (another test flushed them)
}

func (r *tripRecorder) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *tripRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		r.note([]redis.Cmder{cmd})
		err := next(ctx, cmd)
		r.seen([]redis.Cmder{cmd})
		return err
	}
}

func (r *tripRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		r.note(cmds)
		err := next(ctx, cmds)
		r.seen(cmds)
		return err
	}
}

func (r *tripRecorder) seen(cmds []redis.Cmder) {
	for _, c := range cmds {
		if err := c.Err(); err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			r.mu.Lock()
			r.noScript = true
			r.mu.Unlock()
		}
	}
}

func (r *tripRecorder) note(cmds []redis.Cmder) {
	var trip []string
	for _, c := range cmds {
		a := c.Args()
		key := ""
		switch n := strings.ToLower(c.Name()); {
		case (n == "evalsha" || n == "eval") && len(a) > 3:
			key, _ = a[3].(string)
			key += fmt.Sprintf(" (%v keys)", a[2])
			if n, _ := a[2].(int); n >= 4 && len(a) > 6 {
				// A release that waits for the final event's marker (its 4th key).
				if k4, _ := a[6].(string); strings.Contains(k4, "answered:") {
					key += " after answered"
				}
			}
		case len(a) > 1:
			key, _ = a[1].(string)
		}
		trip = append(trip, strings.ToLower(c.Name())+" "+key)
	}
	r.mu.Lock()
	r.trips = append(r.trips, trip)
	r.mu.Unlock()
}

// A turn takes its conversation's lock and reads its journal record, intents, answered marker
// and the chat's pending approval in one round trip (the reads run after the acquire, so with
// the lock held), and reads the record nowhere else; it releases the lock in the round trip
// that writes its final event.
// Both when the worker makes its client and when it is given Replies and Journal with their
// client (RedisClient: the lettaq worker command does so).
func TestTurnStartIsOneRoundTrip(t *testing.T) {
	t.Run("made", func(t *testing.T) {
		testTurnRoundTrips(t, func(c *queue.WorkerConfig, opt hookedOpt) { c.Redis = opt })
	})
	t.Run("given", func(t *testing.T) {
		testTurnRoundTrips(t, func(c *queue.WorkerConfig, opt hookedOpt) {
			rdb := opt.MakeRedisClient().(*redis.Client)
			t.Cleanup(func() { _ = rdb.Close() })
			c.Redis, c.Stores.RedisClient = opt, rdb
			c.Stores.Replies = queue.NewReplies(rdb, c.Stores.RepliesOptions)
			c.Stores.Journal = queue.NewJournal(rdb, c.Stores.JournalOptions)
		})
	})
}

// isScriptOn reports whether c, as tripRecorder notes it, calls a script whose first key
// starts with prefix: by its sha, or by its text (a round trip's first call of a script that a
// later write follows goes as EVAL).
func isScriptOn(c, prefix string) bool {
	return strings.HasPrefix(c, "evalsha "+prefix) || strings.HasPrefix(c, "eval "+prefix)
}

func testTurnRoundTrips(t *testing.T, setup func(*queue.WorkerConfig, hookedOpt)) {
	e := newEnv(t)
	rec := &tripRecorder{}
	e.startWorker("w1", func(c *queue.WorkerConfig) { setup(c, hookedOpt{e.redisOpt(), rec}) })
	agent := e.sim.CreateAgent("trips", nil)
	checked := 0
	for i := range 4 {
		c := e.conv("trips")
		res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"})
		if final, evs := e.waitFinal(c, res.TaskID, 20*time.Second); final.Type != record.EventAnswer {
			t.Fatalf("turn %d: final %+v; events %s", i, final, summarize(evs))
		}
		recordKey := e.prefix + "journal:turn:" + res.TaskID
		rec.mu.Lock()
		together, alone, released := 0, 0, 0
		for _, trip := range rec.trips {
			reads, acquires, releases, final := false, false, false, false
			for _, c := range trip {
				reads = reads || c == "get "+recordKey
				line := isScriptOn(c, e.prefix+"ord:line:")
				acquires = acquires || line && strings.HasSuffix(c, "(4 keys)") && len(trip) > 1
				releases = releases || line && (strings.HasSuffix(c, "(3 keys)") || strings.HasSuffix(c, "(4 keys) after answered"))
				final = final || isScriptOn(c, e.prefix+"replies:")
			}
			switch {
			case reads && acquires:
				together++
			case reads:
				alone++
			}
			if releases && final {
				released++
			}
		}
		rec.trips = nil
		noScript := rec.noScript
		rec.noScript = false
		rec.mu.Unlock()
		if noScript {
			// The pipelined acquire met a Redis without its script (a test elsewhere
			// flushed them): it is made again on its own, as it should be.
			t.Logf("turn %d: NOSCRIPT met; not counted", i)
			continue
		}
		checked++
		if released != 1 {
			t.Errorf("turn %d: the lock was released with the final event in %d round trips, want 1", i, released)
		}
		if together != 1 || alone != 0 {
			t.Errorf("turn %d: the record was read with the acquire in %d round trips and alone in %d; want 1 and 0", i, together, alone)
		}
	}
	if checked < 2 {
		t.Fatalf("only %d turns without NOSCRIPT: is something flushing Redis's scripts?", checked)
	}
}

// slowFinal is a hook whose first round trip that writes a final event (a script whose keys
// hold an answered marker) takes delay: longer than the delivery allowance.
func slowFinal(marker string, delay time.Duration) pipelineHook {
	var once sync.Once
	return func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			for _, c := range cmds {
				if n := strings.ToLower(c.Name()); n != "evalsha" && n != "eval" {
					continue // (the start's reads look at the marker too)
				}
				for _, a := range c.Args() {
					if s, ok := a.(string); ok && strings.HasPrefix(s, marker) {
						once.Do(func() { time.Sleep(delay) })
					}
				}
			}
			return next(ctx, cmds)
		}
	}
}

// outcomeCounter counts the turns an Observer hears finished, by outcome.
type outcomeCounter struct {
	queue.NopObserver
	mu  sync.Mutex
	out map[string]int
}

func (f *outcomeCounter) TurnFinished(_ string, outcome string, _, _ time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.out == nil {
		f.out = map[string]int{}
	}
	f.out[outcome]++
}

func (f *outcomeCounter) count(outcome string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.out[outcome]
}

// A final event whose write outlasts the delivery allowance lands late: the attempt has
// stopped waiting and retries, the retry finds the turn finished. The turn is still reported
// finished, once (by the attempt whose write landed), and its answer written once.
func TestLateFinalWriteCountsTheTurnOnce(t *testing.T) {
	e := newEnv(t)
	obs := &outcomeCounter{}
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Redis = hookedOpt{e.redisOpt(), slowFinal(e.prefix+"answered:", e.budget.DeliveryAllowance+500*time.Millisecond)}
		c.Observer = obs
	})
	agent := e.sim.CreateAgent("late", nil)
	c := e.conv("late")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v; events %s", final, summarize(evs))
	}
	// The late write reports the turn; the retry comes a second later, finds the turn
	// finished and completes the task (a report of its own would come before that).
	deadline := time.Now().Add(15 * time.Second)
	for {
		info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
		if err == nil && info.State == asynq.TaskStateCompleted && info.Retried >= 1 && obs.count(record.OutcomeAnswered) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %+v (%v), answered reported %d times; journal %s", info, err,
				obs.count(record.OutcomeAnswered), describeAttempts(e.record(res.TaskID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.countedAndAnsweredOnce(obs, c, res.TaskID)
}

// countedAndAnsweredOnce checks that the turn was reported finished once, and answered with
// one answer event.
func (e *env) countedAndAnsweredOnce(obs *outcomeCounter, c record.Conversation, taskID string) {
	e.t.Helper()
	if n := obs.count(record.OutcomeAnswered); n != 1 {
		e.t.Errorf("turn reported finished %d times, want 1", n)
	}
	answers := 0
	for _, ev := range e.events(c, taskID) {
		if ev.Type == record.EventAnswer {
			answers++
		}
	}
	if answers != 1 {
		e.t.Errorf("%d answer events, want 1", answers)
	}
}

// finalRace is a hook that orders one race on purpose: the first write of a final
// event (a script with an answered marker in its arguments) is held until the next attempt
// has read the marker at its start (and found none), and that attempt's own final write is
// held until the first one has landed. So the retry goes on with the turn and finds its final
// event already written by the attempt that stopped waiting for it.
type finalRace struct {
	marker                string
	mu                    sync.Mutex
	finals                int
	held                  bool
	retryRead, firstLands chan struct{}
	readOnce              sync.Once
}

func (r *finalRace) hook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		final, read := false, false
		for _, c := range cmds {
			n := strings.ToLower(c.Name())
			for _, a := range c.Args()[1:] {
				if s, ok := a.(string); ok && strings.HasPrefix(s, r.marker) {
					final = final || n == "evalsha" || n == "eval"
					read = read || n == "get" || n == "exists"
				}
			}
		}
		if final {
			r.mu.Lock()
			r.finals++
			nth := r.finals
			r.held = r.held || nth == 1
			r.mu.Unlock()
			switch nth {
			case 1:
				select {
				case <-r.retryRead:
				case <-time.After(15 * time.Second):
				}
				err := next(ctx, cmds)
				close(r.firstLands)
				return err
			case 2:
				select {
				case <-r.firstLands:
				case <-time.After(15 * time.Second):
				}
			}
			return next(ctx, cmds)
		}
		err := next(ctx, cmds)
		r.mu.Lock()
		held := r.held
		r.mu.Unlock()
		if read && held {
			r.readOnce.Do(func() { close(r.retryRead) })
		}
		return err
	}
}

// The retry of an attempt that stopped waiting for its final write goes on with the turn
// (no answered marker yet), and meets the event the first attempt's late write put there:
// the turn is counted once, by the late write, and answered once.
func TestRetryMeetingALateFinalWriteCountsTheTurnOnce(t *testing.T) {
	e := newEnv(t)
	obs := &outcomeCounter{}
	race := &finalRace{marker: e.prefix + "answered:", retryRead: make(chan struct{}), firstLands: make(chan struct{})}
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Redis = hookedOpt{e.redisOpt(), pipelineHook(race.hook)}
		c.Observer = obs
	})
	agent := e.sim.CreateAgent("race", nil)
	c := e.conv("race")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"})
	deadline := time.Now().Add(30 * time.Second)
	for {
		info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
		if err == nil && info.State == asynq.TaskStateCompleted && obs.count(record.OutcomeAnswered) >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %+v (%v), answered reported %d times; journal %s", info, err,
				obs.count(record.OutcomeAnswered), describeAttempts(e.record(res.TaskID)))
		}
		time.Sleep(20 * time.Millisecond)
	}
	race.mu.Lock()
	finals := race.finals
	race.mu.Unlock()
	select {
	case <-race.retryRead:
	default:
		t.Fatalf("the race was not staged: no retry read the marker while the first final write was held (%d final writes)", finals)
	}
	if finals < 2 {
		t.Fatalf("%d final writes: the retry did not go on with the turn", finals)
	}
	// Both reports, if there were two, came before the task completed: the late write's
	// before the retry's final write (held until it landed), the retry's before its handler
	// returned.
	e.countedAndAnsweredOnce(obs, c, res.TaskID)
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Errorf("otid stored %d times at Letta, want 1", n)
	}
}

// The ordering acquires (with the start's reads) of turns that start while the worker's
// writer is busy ride its next round trip together: a turn's start has no round trip of its
// own. The writer's first round trip with an acquire is held until every turn is running.
func TestTurnStartsShareTheWritersRoundTrip(t *testing.T) {
	e := newEnv(t)
	const n = 8
	acquire := "evalsha " + e.prefix + "ord:line:"
	isAcquire := func(c redis.Cmder) bool {
		a := c.Args()
		if len(a) < 4 || strings.ToLower(c.Name()) != "evalsha" || fmt.Sprint(a[2]) != "4" {
			return false
		}
		k, _ := a[3].(string)
		if len(a) > 6 {
			if k4, _ := a[6].(string); strings.Contains(k4, "answered:") {
				return false // a release that waits for the final event's marker
			}
		}
		return strings.HasPrefix("evalsha "+k, acquire)
	}
	release := make(chan struct{})
	var (
		held    sync.Once
		mu      sync.Mutex
		perTrip []int // acquires per round trip
	)
	hook := pipelineHook(func(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
		return func(ctx context.Context, cmds []redis.Cmder) error {
			k := 0
			for _, c := range cmds {
				if isAcquire(c) {
					k++
				}
			}
			if k > 0 {
				held.Do(func() { <-release })
				mu.Lock()
				perTrip = append(perTrip, k)
				mu.Unlock()
			}
			return next(ctx, cmds)
		}
	})
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Redis = hookedOpt{e.redisOpt(), hook} })
	agent := e.sim.CreateAgent("share", nil)
	type turn struct {
		c  record.Conversation
		id string
	}
	var turns []turn
	for range n {
		c := e.conv("share")
		turns = append(turns, turn{c, e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"}).TaskID})
	}
	// Every turn running: the first holds the writer, the others wait in its queue.
	deadline := time.Now().Add(20 * time.Second)
	for {
		active, err := e.insp.ListActiveTasks(e.queue)
		if err == nil && len(active) == n {
			break
		}
		if time.Now().After(deadline) {
			close(release)
			t.Fatalf("%d of %d turns running (%v)", len(active), n, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // (from running to queued at the writer: decoding the payload)
	close(release)
	for _, tu := range turns {
		if final, evs := e.waitFinal(tu.c, tu.id, 20*time.Second); final.Type != record.EventAnswer {
			t.Fatalf("turn %s: final %+v; events %s", tu.id, final, summarize(evs))
		}
	}
	mu.Lock()
	defer mu.Unlock()
	most, all := 0, 0
	for _, k := range perTrip {
		most, all = max(most, k), all+k
	}
	// (All but the held one go together when every turn reached the writer while it was
	// held; half of them is enough to show the sharing: one each is the code before.)
	if all != n || most < n/2 {
		t.Fatalf("acquires per round trip %v: want the %d turns' shared (the held one, then the rest together)", perTrip, n)
	}
}

// An instant turn's journal saves go with a write that is waited for: the one that carries the
// send's intent, or the end's (with the final event), or alone once their window passed; never
// with the progress events in between, which an intermediate save (the turn's start, its thread,
// its run id) used to ride. So an instant turn saves its record twice, not four times.
func TestInstantTurnSavesWithItsIntentAndItsEnd(t *testing.T) {
	e := newEnv(t)
	rec := &tripRecorder{}
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Redis = hookedOpt{e.redisOpt(), rec} })
	agent := e.sim.CreateAgent("saves", nil)
	for i := range 6 {
		c := e.conv("saves")
		t0 := time.Now()
		res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"})
		if final, evs := e.waitFinal(c, res.TaskID, 20*time.Second); final.Type != record.EventAnswer {
			t.Fatalf("turn %d: final %+v; events %s", i, final, summarize(evs))
		}
		took := time.Since(t0)
		recordKey := e.prefix + "journal:turn:" + res.TaskID
		rec.mu.Lock()
		withIntent, withEnd, alone, withEvents := 0, 0, 0, 0
		for _, trip := range rec.trips {
			saves, intent, final, events := 0, false, false, 0
			for _, c := range trip {
				switch {
				case isScriptOn(c, recordKey):
					saves++
				case isScriptOn(c, e.prefix+"journal:intents:"+res.TaskID):
					intent = true
				case isScriptOn(c, "asynq:"): // the task's result, written at the end
					final = true
				case isScriptOn(c, e.prefix+"replies:"):
					events++
				}
			}
			switch {
			case saves == 0:
			case intent:
				withIntent += saves
			case final:
				withEnd += saves
			case len(trip) == saves:
				alone += saves
			default:
				withEvents += saves
			}
		}
		rec.trips = nil
		rec.mu.Unlock()
		// A turn quicker than the window (250 ms) leaves no save to go alone.
		wantAlone := "any"
		if took < 200*time.Millisecond && alone > 0 {
			wantAlone = "0"
		}
		if withIntent != 1 || withEnd != 1 || withEvents != 0 || wantAlone == "0" {
			t.Errorf("turn %d (%v): saves with the intent %d, with the end %d, alone %d, with progress events %d; want 1, 1, %s, 0",
				i, took, withIntent, withEnd, alone, withEvents, wantAlone)
		}
	}
}
