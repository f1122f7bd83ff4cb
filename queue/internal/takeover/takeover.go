// Package takeover is fast takeover: the worker's side of the registry (its beats, the watch
// of the other workers, the claims of the dead ones through queue/internal/claim) and each
// attempt's registration in it (Registration: register, fence, unregister).
//
// Asynq finds the tasks of a worker process that died (OOM kill, node loss, kill -9) only
// through its lease: 60 to 165 s later, and it uses one of the task's retries. lettaq keeps a
// registry of its own instead (queue/internal/store's takeover keys): every worker beats every
// TakeoverBeat and lists the turns it runs; every worker watches the others' beats, and the
// first to see one silent for TakeoverAfter claims it (atomically: one claimer), tombstones
// it, and enqueues a takeover task per turn it ran. A takeover task runs its turn under the
// turn's own identity (task id, otid, journal record, reply stream, ordering line), down the
// usual retry path: the journal's intent says the message may have been sent, so the attempt
// finds the run by its otid and continues it; nothing is sent twice. Under ordering its
// acquire by the same task id takes the conversation's lock over with a new token, which
// fences the original holder's lease.
//
// The original task, when Asynq recovers it later (Retried > 0), finds the turn taken over
// (takenover marker naming another runner) and ends at once, writing nothing. A worker that
// was only paused or cut off (a long GC, a frozen VM, a partition) finds its tombstone at its
// next beat and stops its turns, and before a send or a final write it checks its tombstone
// when its last good beat is old (fencing).
//
// One runner of a turn at a time: a runner's registration makes it the turn's holder and
// takes the turn from the previous holder (out of its worker's hash, so that a claim does not
// take it over; named in that worker's lost set, so that its next beat, or the beat of a
// fencing check, stops that runner: stopTaken). A takeover task does not start while a live
// runner holds its turn (Registration.ContinuedElsewhere). The newest runner is the one that
// started last: each start read numbers the runner (store.StartReads.Runner), a registration
// takes nothing from a live holder numbered higher (the registering runner stops instead),
// and a journal save writes nothing over a record that a runner numbered higher saved
// (queue's Journal.saveOp): the runner that holds the turn writes its record, and a stale one
// overwrites nothing before it learns it lost.
//
// The package does not reach up into the attempt: an attempt's Registration holds the
// attempt's runner (fence.Runner), its log and its observer, and returns the registry writes
// that go with the attempt's own (Register, UnregisterOps) for the attempt to send.
package takeover

import (
	"context"
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

// ErrTakenOver is the cause of an attempt's context when its worker finds the turn was taken
// over by another worker (fencing).
var ErrTakenOver = errors.New("lettaq: the turn was taken over by another worker")

// Config is what a Registry is made of.
type Config struct {
	Store    *store.Takeover
	Conn     asynq.RedisConnOpt // the takeover tasks' client and the claims' inspector are made from it
	WorkerID string             // an instance id is WorkerID/random
	After    time.Duration      // TakeoverAfter: a worker silent that long is dead
	Beat     time.Duration      // TakeoverBeat
	// TaskType and TaskTimeout are a takeover task's type and timeout.
	TaskType    string
	TaskTimeout time.Duration
	Log         *slog.Logger
	// TakenOver, when set, is told of each turn this worker took over from a dead one.
	TakenOver func(queue string)
}

// epoch is one registration of this worker process in the registry: a new one (new instance
// id) after the old one was tombstoned.
type epoch struct {
	id     string
	dead   atomic.Bool
	lastOK atomic.Int64 // monotonic time (since Registry.base) of the last good beat

	checkMu sync.Mutex // one confirm at a time
}

// Registry is the worker's side of the registry: its beats, the watch, the attempts that run
// here. A nil Registry is takeover off: its attempts register nothing.
type Registry struct {
	cfg    Config
	st     *store.Takeover
	after  time.Duration
	beat   time.Duration
	base   time.Time
	log    *slog.Logger
	client *asynq.Client
	insp   *asynq.Inspector
	// running: the beats run (Open, Start); a worker whose handler runs under another
	// server (queue's Worker.Handler) registers nothing.
	running atomic.Bool
	ticker  *service.Ticker // the beats (Start, Stop)

	// reregMu is held by a beat that writes the running turns back (from its list of them
	// to its last write's end), and taken by a turn's end before it reads rewritten: a turn
	// that ends while its entry is being written back removes it again.
	reregMu sync.Mutex

	mu        sync.Mutex
	epoch     *epoch
	turns     map[*Registration]struct{} // registered turns, of any epoch
	pending   map[*Registration]struct{} // registered turns whose registration has not run yet
	rewritten map[*Registration]struct{} // turns a beat wrote back, until they end
	okSince   time.Duration              // the watcher's beats good without a gap since then (-1: not now)
	lastTick  time.Duration              // the watcher's last good beat (not confirm's)
	beats     int
}

// New returns the worker's registry; turns register once it is opened (Start).
func New(cfg Config) *Registry {
	tk := &Registry{cfg: cfg, st: cfg.Store, after: cfg.After, beat: cfg.Beat, base: time.Now(),
		log: cfg.Log.With(slog.String("component", "takeover")), okSince: -1,
		turns: make(map[*Registration]struct{}), rewritten: make(map[*Registration]struct{}),
		pending: make(map[*Registration]struct{})}
	tk.epoch = tk.newEpoch()
	return tk
}

func (tk *Registry) newEpoch() *epoch {
	return &epoch{id: fmt.Sprintf("%s/%08x", tk.cfg.WorkerID, rand.Uint32())}
}

func (tk *Registry) now() time.Duration { return time.Since(tk.base) }

// current is the epoch that turns register under now.
func (tk *Registry) current() *epoch {
	tk.mu.Lock()
	defer tk.mu.Unlock()
	return tk.epoch
}

// Instance is this worker's instance id in the registry now.
func (tk *Registry) Instance() string { return tk.current().id }

// Running reports whether turns register now (between Open and Close).
func (tk *Registry) Running() bool { return tk != nil && tk.running.Load() }

// Open makes the claims' client and inspector: turns register from now on. Start opens the
// registry and starts its beats; a registry opened on its own is beaten by hand (Tick).
func (tk *Registry) Open() {
	tk.client = asynq.NewClient(tk.cfg.Conn)
	tk.insp = asynq.NewInspector(tk.cfg.Conn)
	tk.running.Store(true)
}

// Close undoes Open: turns register no more.
func (tk *Registry) Close() {
	tk.running.Store(false)
	_ = tk.client.Close()
	_ = tk.insp.Close()
}

// Start starts the beats and the watch (a service.Ticker of Tick, every TakeoverBeat ±10%,
// so that the watchers do not all look at once): turns register from now on.
func (tk *Registry) Start(ctx context.Context) error {
	tk.Open()
	tk.log.Info("takeover on", "instance", tk.current().id, "after", tk.after.String(), "beat", tk.beat.String())
	tk.ticker = &service.Ticker{Every: tk.beat, Jitter: 0.1, Immediate: true, Tick: tk.Tick}
	return tk.ticker.Start(ctx)
}

// Stop ends the beats and takes the worker out of the registry (a graceful stop: its turns
// were put back through Asynq and are not taken over).
func (tk *Registry) Stop() {
	if tk.ticker == nil {
		return
	}
	tk.ticker.Stop()
	tk.ticker = nil
	tk.Close()
	tk.Leave()
}

// Tick is one beat: record it, fence this worker when it was claimed, re-register its turns
// when the registry lost them, and claim the workers that stopped beating.
func (tk *Registry) Tick(ctx context.Context) {
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
	var again []*Registration
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

// countLocked counts e's running turns whose registration ran: those the registry should
// hold (one whose registration waits for its round trip is written by it).
func (tk *Registry) countLocked(e *epoch) int {
	return len(tk.runningLocked(e))
}

func (tk *Registry) runningLocked(e *epoch) []*Registration {
	var out []*Registration
	for r := range tk.turns {
		if _, waits := tk.pending[r]; !waits && r.running(e) {
			out = append(out, r)
		}
	}
	return out
}

// registerAgain writes the running turns of e back, when the registry lost them (a Redis
// restart without persistence) or their registration did not reach it, and unlocks reregMu.
// A turn that a live runner holds now is left to it. A turn whose last writes took it out
// meanwhile finds itself in rewritten at its end (Unregister), and takes its entry out again.
func (tk *Registry) registerAgain(ctx context.Context, e *epoch, turns []*Registration) {
	defer tk.reregMu.Unlock()
	if len(turns) == 0 {
		return
	}
	regs := make([]store.Registration, 0, len(turns))
	of := make([]*Registration, 0, len(turns))
	for _, r := range turns {
		regs, of = append(regs, r.registration(e)), append(of, r)
	}
	held, err := tk.st.RegisterAll(ctx, regs)
	tk.mu.Lock()
	for _, r := range turns {
		tk.rewritten[r] = struct{}{} // (on an error too: some may have been written)
	}
	tk.mu.Unlock()
	for i, h := range held {
		if h {
			of[i].at.Log.Warn("a live runner elsewhere holds the turn: this attempt stops and writes nothing more", "runner", of[i].rn.ID)
			of[i].rn.Fence(ErrTakenOver)
		}
	}
	if err != nil {
		tk.log.Warn("could not register the running turns again", "error", err.Error())
		return
	}
	tk.log.Info("the takeover registry had lost this worker's turns: registered again", "turns", len(regs))
}

// stopTaken stops the runners of e's turns that another runner registered since
// (Beat.Taken): one runner of a turn at a time, the newest. They write nothing more, as a
// turn taken over from a dead worker.
func (tk *Registry) stopTaken(e *epoch, taken []store.Holder) {
	if len(taken) == 0 {
		return
	}
	var stop []*Registration
	tk.mu.Lock()
	for r := range tk.turns {
		for _, h := range taken {
			if r.epoch == e && r.at.TaskID == h.TaskID && r.rn.ID == h.Runner {
				stop = append(stop, r)
			}
		}
	}
	tk.mu.Unlock()
	for _, r := range stop {
		r.at.Log.Warn("another runner holds the turn now: this attempt stops and writes nothing more", "runner", r.rn.ID)
		r.rn.Fence(ErrTakenOver)
	}
}

// tombstoned: another worker took this one for dead and took its turns over. They stop at
// once and write nothing more; the worker goes on under a new instance id.
func (tk *Registry) tombstoned(e *epoch) {
	tk.mu.Lock()
	if tk.epoch != e {
		tk.mu.Unlock()
		return
	}
	e.dead.Store(true)
	tk.epoch = tk.newEpoch()
	tk.okSince = -1
	var stop []*Registration
	for r := range tk.turns {
		if r.epoch == e {
			stop = append(stop, r)
		}
	}
	tk.mu.Unlock()
	tk.log.Warn("this worker was taken for dead and its turns taken over by another: stopping them, writing nothing more for them",
		"instance", e.id, "turns", len(stop), "new_instance", tk.current().id)
	for _, r := range stop {
		r.rn.Fence(ErrTakenOver)
	}
}

// claim takes the turns of the dead worker over, when this watcher is the one that claims it
// (queue/internal/claim).
func (tk *Registry) claim(ctx context.Context, me, dead string) {
	c := claim.Claimer{Store: tk.st, Client: tk.client, Inspector: tk.insp, Log: tk.log, After: tk.after,
		TaskType: tk.cfg.TaskType, Timeout: tk.cfg.TaskTimeout, TakenOver: tk.cfg.TakenOver}
	c.Claim(ctx, me, dead)
}

// Leave takes this worker out of the registry (at a graceful stop).
func (tk *Registry) Leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := tk.st.Leave(ctx, tk.current().id); err != nil {
		tk.log.Warn("could not leave the takeover registry", "error", err.Error())
	}
}

// confirm beats now for e, whose last good beat is old: it reports whether e was tombstoned
// (and fences its turns then). A beat refreshes e's score in the same step, so that no claim
// can take it between the check and the write that follows (but for a pause right there: see
// docs/reliability.md). Concurrent callers share one beat. An error counts as not tombstoned.
func (tk *Registry) confirm(ctx context.Context, e *epoch) bool {
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

// Alive wraps alive (ordering's test of a dead head): a head whose task is gone is alive
// still when its turn was taken over and the takeover's task is alive (the original ends at
// once once Asynq recovers it, while the takeover may wait for a retry). A nil Registry
// returns alive.
func (tk *Registry) Alive(alive ordering.AliveFunc) ordering.AliveFunc {
	if tk == nil {
		return alive
	}
	return func(ctx context.Context, taskID string) (bool, error) {
		ok, err := alive(ctx, taskID)
		if ok || err != nil {
			return ok, err
		}
		by, err := tk.st.TakenOverBy(ctx, taskID)
		if err != nil || by == "" || by == taskID {
			return false, err
		}
		return alive(ctx, by)
	}
}
