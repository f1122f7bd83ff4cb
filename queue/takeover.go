package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/service"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// Fast takeover. Asynq finds the tasks of a worker process that
// died (OOM kill, node loss, kill -9) only through its lease: 60 to 165 s
// later, and it uses one of the task's retries. lettaq keeps a registry of
// its own instead (queue/internal/store's takeover keys): every worker
// beats every TakeoverBeat and lists the turns it runs; every worker
// watches the others' beats, and the first to see one silent for
// TakeoverAfter claims it (atomically: one claimer), tombstones it, and
// enqueues a takeover task per turn it ran. A takeover task runs its turn
// under the turn's own identity (task id, otid, journal record, reply
// stream, ordering line), down the usual retry path: the journal's intent
// says the message may have been sent, so the attempt finds the run by its
// otid and continues it; nothing is sent twice. Under ordering its acquire
// by the same task id takes the conversation's lock over with a new token,
// which fences the original holder's lease.
//
// The original task, when Asynq recovers it later (Retried > 0), finds the
// turn taken over (takenover marker naming another runner) and ends at
// once, writing nothing. A worker that was only paused or cut off (a long
// GC, a frozen VM, a partition) finds its tombstone at its next beat and
// stops its turns, and before a send or a final write it checks its
// tombstone when its last good beat is old (fencing).
//
// One runner of a turn at a time: a runner's registration makes it the
// turn's holder and takes the turn from the previous holder (out of its
// worker's hash, so that a claim does not take it over; named in that
// worker's lost set, so that its next beat, or the beat of a fencing
// check, stops that runner: stopTaken). A takeover task does not start
// while a live runner holds its turn (continuedElsewhere). The newest
// runner is the one that started last: each start read numbers the
// runner (store.StartReads.Runner), a registration takes nothing from a
// live holder numbered higher (the registering runner stops instead), and
// a journal save writes nothing over a record that a runner numbered
// higher saved (Journal.saveOp): the runner that holds the turn writes its
// record, and a stale one overwrites nothing before it learns it lost.

const (
	// defaultTakeoverBeat is WorkerConfig.TakeoverBeat's default.
	defaultTakeoverBeat = time.Second
)

// errTakenOver is the cause of a turn's context when its worker finds the
// turn was taken over by another worker (fencing).
var errTakenOver = errors.New("lettaq: the turn was taken over by another worker")

// TakeoverObserver, when the worker's Observer implements it, is told of
// each turn this worker took over from a dead one.
type TakeoverObserver interface {
	TurnTakenOver(queue string)
}

// takeoverEpoch is one registration of this worker process in the
// registry: a new one (new instance id) after the old one was tombstoned.
type takeoverEpoch struct {
	id     string
	dead   atomic.Bool
	lastOK atomic.Int64 // monotonic time (since takeover.base) of the last good beat

	checkMu sync.Mutex // one confirm at a time
}

// takeover is the worker's side of the registry.
type takeover struct {
	w      *Worker
	st     *store.Takeover
	after  time.Duration
	beat   time.Duration
	base   time.Time
	log    *slog.Logger
	client *asynq.Client
	insp   *asynq.Inspector
	// running: the beats run (Worker.Run); a worker whose handler runs
	// under another server (Worker.Handler) registers nothing.
	running atomic.Bool
	ticker  *service.Ticker // the beats (Start, Stop)

	// reregMu is held by a beat that writes the running turns back (from
	// its list of them to its last write's end), and taken by a turn's
	// end before it reads rewritten: a turn that ends while its entry is
	// being written back removes it again.
	reregMu sync.Mutex

	mu        sync.Mutex
	epoch     *takeoverEpoch
	turns     map[*turn]struct{} // registered turns, of any epoch
	pending   map[*turn]struct{} // registered turns whose registration has not run yet
	rewritten map[*turn]struct{} // turns a beat wrote back, until they end
	okSince   time.Duration      // the watcher's beats good without a gap since then (-1: not now)
	lastTick  time.Duration      // the watcher's last good beat (not confirm's)
	beats     int
}

func newTakeover(w *Worker) *takeover {
	tk := &takeover{w: w, after: w.cfg.TakeoverAfter, beat: w.cfg.TakeoverBeat, base: time.Now(),
		log: w.log.With(slog.String("component", "takeover")),
		st:  store.NewTakeover(w.replies.rdb, store.Keys{Prefix: w.replies.opts.Prefix}), okSince: -1,
		turns: make(map[*turn]struct{}), rewritten: make(map[*turn]struct{}),
		pending: make(map[*turn]struct{})}
	tk.epoch = tk.newEpoch()
	return tk
}

func (tk *takeover) newEpoch() *takeoverEpoch {
	return &takeoverEpoch{id: fmt.Sprintf("%s/%08x", tk.w.cfg.WorkerID, rand.Uint32())}
}

func (tk *takeover) now() time.Duration { return time.Since(tk.base) }

// current is the epoch that turns register under now.
func (tk *takeover) current() *takeoverEpoch {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.epoch
}

// Start starts the beats and the watch (a service.Ticker of tick, every
// TakeoverBeat ±10%, so that the watchers do not all look at once): turns
// register from now on.
func (tk *takeover) Start(ctx context.Context) error {
	tk.client = asynq.NewClient(tk.w.conn)
	tk.insp = asynq.NewInspector(tk.w.conn)
	tk.running.Store(true)
	tk.log.Info("takeover on", "instance", tk.current().id, "after", tk.after.String(), "beat", tk.beat.String())
	tk.ticker = &service.Ticker{Every: tk.beat, Jitter: 0.1, Immediate: true, Tick: tk.tick}
	return tk.ticker.Start(ctx)
}

// Stop ends the beats and takes the worker out of the registry (a graceful
// stop: its turns were put back through Asynq and are not taken over).
func (tk *takeover) Stop() {
	if tk.ticker == nil {
		return
	}
	tk.ticker.Stop()
	tk.ticker = nil
	tk.running.Store(false)
	_ = tk.client.Close()
	_ = tk.insp.Close()
	tk.leave()
}

// tick is one beat: record it, fence this worker when it was claimed,
// re-register its turns when the registry lost them, and claim the
// workers that stopped beating.
func (tk *takeover) tick(ctx context.Context) {
	e := tk.current()
	bctx, cancel := context.WithTimeout(ctx, max(tk.beat, time.Second))
	b, err := tk.st.Beat(bctx, e.id, tk.after)
	cancel()
	if err != nil {
		if ctx.Err() == nil {
			tk.log.Debug("takeover beat failed", "error", err.Error())
		}
		return
	}
	if b.Tombstoned {
		tk.tombstoned(e)
		return
	}
	tk.stopTaken(e, b.Taken)
	now := tk.now()
	e.lastOK.Store(int64(now))
	tk.reregMu.Lock()
	tk.mu.Lock()
	prev := tk.lastTick
	tk.lastTick = now
	if tk.okSince < 0 || prev == 0 || now-prev > tk.after/2 {
		tk.okSince = now // a gap: the watcher waits for a whole TakeoverAfter of good beats
	}
	eligible := now-tk.okSince >= tk.after
	first := tk.beats == 0
	tk.beats++
	var again []*turn
	if b.Lost && !first || b.Turns < tk.countLocked(e) {
		again = tk.runningLocked(e)
	}
	tk.mu.Unlock()
	tk.registerAgain(ctx, e, again) // unlocks reregMu
	if !eligible {
		return
	}
	for _, dead := range b.Stale {
		tk.claim(ctx, e.id, dead)
	}
}

// running reports whether t is a running turn of e's: registered under
// it, not ended by its last writes, not fenced.
func (t *turn) running(e *takeoverEpoch) bool {
	return t.tkEpoch == e && !t.rn.IsGone() && !t.rn.IsFenced()
}

// countLocked counts e's running turns whose registration ran: those the
// registry should hold (one whose registration waits for its round trip
// is written by it).
func (tk *takeover) countLocked(e *takeoverEpoch) int {
	return len(tk.runningLocked(e))
}

func (tk *takeover) runningLocked(e *takeoverEpoch) []*turn {
	var out []*turn
	for t := range tk.turns {
		if _, waits := tk.pending[t]; !waits && t.running(e) {
			out = append(out, t)
		}
	}
	return out
}

// registerAgain writes the running turns of e back, when the registry lost
// them (a Redis restart without persistence) or their registration did not
// reach it, and unlocks reregMu. A turn that a live runner holds now is
// left to it. A turn
// whose last writes took it out meanwhile finds itself in rewritten at its
// end (unregister), and takes its entry out again.
func (tk *takeover) registerAgain(ctx context.Context, e *takeoverEpoch, turns []*turn) {
	defer tk.reregMu.Unlock()
	if len(turns) == 0 {
		return
	}
	regs := make([]store.Registration, 0, len(turns))
	of := make([]*turn, 0, len(turns))
	for _, t := range turns {
		if r, err := t.registration(e); err == nil {
			regs, of = append(regs, r), append(of, t)
		}
	}
	held, err := tk.st.RegisterAll(ctx, regs)
	tk.mu.Lock()
	for _, t := range turns {
		tk.rewritten[t] = struct{}{} // (on an error too: some may have been written)
	}
	tk.mu.Unlock()
	for i, h := range held {
		if h {
			of[i].log.Warn("a live runner elsewhere holds the turn: this attempt stops and writes nothing more", "runner", of[i].rn.ID)
			of[i].rn.Fence(errTakenOver)
		}
	}
	if err != nil {
		tk.log.Warn("could not register the running turns again", "error", err.Error())
		return
	}
	tk.log.Info("the takeover registry had lost this worker's turns: registered again", "turns", len(regs))
}

// stopTaken stops the runners of e's turns that another runner registered
// since (Beat.Taken): one runner of a turn at a time, the newest. They
// write nothing more, as a turn taken over from a dead worker.
func (tk *takeover) stopTaken(e *takeoverEpoch, taken []store.Holder) {
	if len(taken) == 0 {
		return
	}
	var stop []*turn
	tk.mu.Lock()
	for t := range tk.turns {
		for _, h := range taken {
			if t.tkEpoch == e && t.taskID == h.TaskID && t.rn.ID == h.Runner {
				stop = append(stop, t)
			}
		}
	}
	tk.mu.Unlock()
	for _, t := range stop {
		t.log.Warn("another runner holds the turn now: this attempt stops and writes nothing more", "runner", t.rn.ID)
		t.rn.Fence(errTakenOver)
	}
}

// tombstoned: another worker took this one for dead and took its turns
// over. They stop at once and write nothing more; the worker goes on under
// a new instance id.
func (tk *takeover) tombstoned(e *takeoverEpoch) {
	tk.mu.Lock()
	if tk.epoch != e {
		tk.mu.Unlock()
		return
	}
	e.dead.Store(true)
	tk.epoch = tk.newEpoch()
	tk.okSince = -1
	var stop []*turn
	for t := range tk.turns {
		if t.tkEpoch == e {
			stop = append(stop, t)
		}
	}
	tk.mu.Unlock()
	tk.log.Warn("this worker was taken for dead and its turns taken over by another: stopping them, writing nothing more for them",
		"instance", e.id, "turns", len(stop), "new_instance", tk.current().id)
	for _, t := range stop {
		t.rn.Fence(errTakenOver)
	}
}

// claim takes the turns of the dead worker over, when this watcher is the
// one that claims it (queue/internal/claim).
func (tk *takeover) claim(ctx context.Context, me, dead string) {
	c := claim.Claimer{Store: tk.st, Client: tk.client, Inspector: tk.insp, Log: tk.log, After: tk.after,
		TaskType: TakeoverTaskType, Timeout: tk.w.cfg.Budget.TaskTimeout()}
	if o, ok := tk.w.obs.(TakeoverObserver); ok {
		c.TakenOver = o.TurnTakenOver
	}
	c.Claim(ctx, me, dead)
}

// leave takes this worker out of the registry at a graceful stop.
func (tk *takeover) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := tk.st.Leave(ctx, tk.current().id); err != nil {
		tk.log.Warn("could not leave the takeover registry", "error", err.Error())
	}
}

// register notes in the registry that this worker runs the turn (after it
// got its conversation, when ordered, and its start read numbered its
// runner). A failure is logged: the turn is then only recovered by Asynq's
// lease, as without takeover.
func (t *turn) register(ctx context.Context) {
	tk := t.w.tk
	if tk == nil || t.tkEpoch != nil || !tk.running.Load() {
		return
	}
	tk.mu.Lock()
	e := tk.epoch
	r, err := t.registration(e)
	if err == nil {
		t.tkEpoch = e
		tk.turns[t] = struct{}{}
		tk.pending[t] = struct{}{}
	}
	tk.mu.Unlock()
	if err != nil {
		return
	}
	// With the attempt's next writes (its journal record, the accepted
	// event), at the latest with the intent before its send: a worker that
	// dies before has sent nothing, and Asynq's recovery runs the turn.
	// From then on this runner holds the turn: one that held it before
	// stops at its worker's next beat.
	t.progress.PushOp(tk.st.RegisterOp(r, func() {
		tk.mu.Lock()
		delete(tk.pending, t)
		tk.mu.Unlock()
	}, func() {
		// A runner of the turn that started after this one holds it (and
		// writes its record): this one is the stale one.
		t.log.Warn("a runner of the turn that started later holds it: this attempt stops and writes nothing more", "runner", t.rn.ID)
		t.rn.Fence(errTakenOver)
	}))
}

// unregisterOps take the turn out of the registry with its last writes
// (deliverAtOnce), so that unregister has nothing left to do.
func (t *turn) unregisterOps() []store.Op {
	if t.tkEpoch == nil {
		return nil
	}
	return []store.Op{t.w.tk.st.UnregisterOp(t.tkEpoch.id, t.taskID, t.rn.ID, func() { t.rn.Gone() })}
}

// registration is the turn's registration under e.
func (t *turn) registration(e *takeoverEpoch) (store.Registration, error) {
	b, err := json.Marshal(claim.Entry{Queue: t.queue, Runner: t.rn.ID, Key: t.key, Retried: t.retried, MaxRetry: t.maxRetry})
	return store.Registration{Instance: e.id, TaskID: t.taskID, Runner: t.rn.ID, Entry: b,
		HolderTTL: claim.MarkerTTL, LostTTL: claim.TombstoneTTL, After: t.w.tk.after, Number: t.runnerN}, err
}

// unregister takes the turn out of the registry when its attempt ends.
func (t *turn) unregister() {
	tk := t.w.tk
	if tk == nil || t.tkEpoch == nil {
		return
	}
	tk.mu.Lock()
	delete(tk.turns, t)
	delete(tk.pending, t)
	tk.mu.Unlock()
	// A beat writing the running turns back has this turn in its list, or
	// no longer: after it, rewritten says whether it wrote this one back.
	tk.reregMu.Lock()
	tk.mu.Lock()
	_, again := tk.rewritten[t]
	delete(tk.rewritten, t)
	tk.mu.Unlock()
	tk.reregMu.Unlock()
	if t.tkEpoch.dead.Load() || t.rn.IsGone() && !again {
		return // claimed (the hash is gone, and the turn writes nothing), or done with its last writes
	}
	ctx, cancel := context.WithTimeout(t.detached(), 2*time.Second)
	defer cancel()
	if err := tk.st.Unregister(ctx, t.tkEpoch.id, t.taskID, t.rn.ID); err != nil {
		t.log.Debug("could not unregister the turn", "error", err.Error())
	}
}

// takenOver reports whether the turn was taken over from this worker. When
// the worker's last good beat is older than half of TakeoverAfter (it was
// paused, or cut off from Redis), it asks Redis whether it was tombstoned.
// A failed check counts as not taken over (the write it guards fails too,
// or goes through when Redis is back, and the tombstone is checked then).
func (t *turn) takenOver(ctx context.Context) bool {
	if t.rn.IsFenced() {
		return true
	}
	tk, e := t.w.tk, t.tkEpoch
	if tk == nil || e == nil {
		return false
	}
	if e.dead.Load() {
		t.rn.Fenced()
		return true
	}
	if tk.now()-time.Duration(e.lastOK.Load()) <= tk.after/2 {
		return false
	}
	if !tk.confirm(ctx, e) {
		return t.rn.IsFenced() // (another runner may have taken this turn: confirm's beat stops it)
	}
	t.rn.Fenced()
	return true
}

// fencedNow is takenOver for the writer (progress.Queue.SetFence): the writes of
// a taken-over turn are dropped.
func (t *turn) fencedNow() bool { return t.takenOver(t.actx) }

// confirm beats now for e, whose last good beat is old: it reports whether
// e was tombstoned (and fences its turns then). A beat refreshes e's score
// in the same step, so that no claim can take it between the check and the
// write that follows (but for a pause right there: see docs/reliability.md).
// Concurrent callers share one beat. An error counts as not tombstoned.
func (tk *takeover) confirm(ctx context.Context, e *takeoverEpoch) bool {
	e.checkMu.Lock()
	defer e.checkMu.Unlock()
	if e.dead.Load() {
		return true
	}
	if tk.now()-time.Duration(e.lastOK.Load()) <= tk.after/2 {
		return false // another caller just beat
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	b, err := tk.st.Beat(cctx, e.id, 1<<40)
	if err != nil {
		return false
	}
	if b.Tombstoned {
		tk.tombstoned(e)
		return true
	}
	e.lastOK.Store(int64(tk.now()))
	tk.stopTaken(e, b.Taken)
	return false
}

// endTakenOver ends an attempt whose turn was taken over: it writes
// nothing (no event, no journal, no release of the line).
func (t *turn) endTakenOver() error {
	t.log.Warn("turn taken over by another worker: this attempt stops and writes nothing")
	t.obs.AttemptFinished(t.queue, "taken_over", time.Since(t.start))
	return nil
}

// continuedElsewhere reports whether this runner of the turn is not its
// newest one: Asynq recovered a task (or a takeover task) whose turn a
// takeover continues. It reads the marker only for a task that Asynq ran
// before (a first attempt was never taken over).
func (t *turn) continuedElsewhere(ctx context.Context) bool {
	if t.w.tk == nil {
		return false
	}
	if t.rn.From != "" {
		// A takeover does not start while another runner of the turn is
		// alive (Asynq recovered the turn before the dead worker was
		// claimed, or another takeover runs it).
		me := t.w.tk.current().id
		if h, live := claim.LiveHolder(ctx, t.w.tk.st, t.taskID, t.w.tk.after, t.w.tk.log); live && (h.Instance != me || h.Runner != t.rn.ID) {
			t.log.Info("turn run by another live runner: this takeover ends", "holder", h.Instance, "holder_runner", h.Runner,
				"runner", t.rn.ID)
			return true
		}
	}
	if t.rn.Retried == 0 {
		return false
	}
	by, err := t.w.tk.st.TakenOverBy(ctx, t.taskID)
	if err != nil || by == "" || by == t.rn.ID {
		return false
	}
	t.log.Info("turn continued by another runner: this attempt ends", "continued_by", by, "runner", t.rn.ID)
	return true
}

// takeoverAlive wraps alive (ordering's test of a dead head): a head whose
// task is gone is alive still when its turn was taken over and the
// takeover's task is alive (the original ends at once once Asynq recovers
// it, while the takeover may wait for a retry).
func (w *Worker) takeoverAlive(alive ordering.AliveFunc) ordering.AliveFunc {
	if w.tk == nil {
		return alive
	}
	return func(ctx context.Context, taskID string) (bool, error) {
		ok, err := alive(ctx, taskID)
		if ok || err != nil {
			return ok, err
		}
		by, err := w.tk.st.TakenOverBy(ctx, taskID)
		if err != nil || by == "" || by == taskID {
			return false, err
		}
		return alive(ctx, by)
	}
}
