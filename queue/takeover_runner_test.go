package queue

import (
	"context"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/claim"
	"github.com/lettaq/lettaq/queue/internal/fence"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// One runner of a turn at a time. A worker killed mid-turn while no other
// worker was up: the first worker to start runs the turn's task at once
// (Asynq's recovery), and its watcher, eligible a TakeoverAfter later,
// claims the dead worker. The claim does not take the running turn over; a
// takeover that was made all the same (the claim came first) does not
// start while the recovered runner is alive; and a runner that another
// registered after it stops, at its worker's next beat or at its next
// fencing check, not only at its start.
func TestTakeoverRecoveredTurnNotRunTwice(t *testing.T) {
	e := newTakeoverEnv(t)
	a, b := e.worker("A", 2*time.Second), e.worker("B", 2*time.Second)
	ctx := context.Background()
	e.deadWorker("D/6", 62*time.Second, "turn-6")
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	newRunner := func(w *Worker, runner, from string, retried int) *attempt.Pipeline {
		tr := &attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: runner, Retried: retried, From: from}, Logger: w.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-6", Queue: e.queue}}
		tr.Progress = w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "turn-6"}, func(error) {}, nil)
		tr.Rn.OnFence(func(error) {})
		return withReg(tr)
	}
	start := func(tr *attempt.Pipeline) {
		register(tr)
		tr.Progress.Flush(ctx) // the registration goes with the attempt's first writes
	}

	// Asynq's recovery runs the original on A.
	orig := newRunner(a, "turn-6", "", 1)
	if orig.Tk.ContinuedElsewhere(ctx) {
		t.Fatal("the recovered original ends, with no other runner")
	}
	start(orig)
	a.tk.Tick(ctx)
	if orig.Rn.IsFenced() {
		t.Fatal("the only runner of the turn was stopped")
	}

	// A's watcher is eligible and claims the dead worker.
	a.tk.PrimeEligible()
	a.tk.Tick(ctx)
	if dead, _ := e.st.Tombstoned(ctx, "D/6"); !dead {
		t.Fatal("the dead worker was not claimed")
	}
	if n := len(e.takeoverTasks()); n != 0 {
		t.Errorf("%d takeover tasks for a turn that runs on a live worker, want 0", n)
	}

	// A takeover made before the original registered does not start.
	tko := newRunner(b, claim.TaskID("D/6", "turn-6"), "D/6", 0)
	if !tko.Tk.ContinuedElsewhere(ctx) {
		t.Error("a takeover starts while the recovered original runs")
	}

	// One that registers all the same stops the original at A's next beat.
	start(tko)
	a.tk.Tick(ctx)
	if !orig.Rn.IsFenced() {
		t.Fatal("the original goes on after another runner registered the turn")
	}
	b.tk.Tick(ctx)
	if tko.Rn.IsFenced() {
		t.Fatal("the newest runner was stopped")
	}

	// Another runner on A takes the turn: B's takeover learns it at its
	// next fencing check (its last good beat old: it asks Redis).
	other := newRunner(a, claim.TaskID("D/7", "turn-6"), "D/7", 0)
	start(other)
	tko.Tk.BeatAgo(2 * time.Second)
	if !tko.Tk.TakenOver(ctx) {
		t.Fatal("a runner whose turn another registered goes on writing")
	}
	if other.Tk.TakenOver(ctx) {
		t.Fatal("the newest runner is fenced")
	}
	// Their ends leave nothing registered.
	for _, tr := range []*attempt.Pipeline{orig, tko, other} {
		tr.Tk.Unregister()
	}
	if n := e.rdb.Exists(ctx, e.prefix+"takeover:holder:turn-6", e.prefix+"takeover:turns:"+a.tk.Instance(),
		e.prefix+"takeover:turns:"+b.tk.Instance()).Val(); n != 0 {
		t.Fatalf("%d registry keys left after every runner ended", n)
	}
}

// A running turn whose registration did not reach Redis is written back at
// its worker's next beat, taking the turn from a holder that is not alive
// (the dead worker whose turn Asynq recovered): a claim of that worker
// then does not take it over. From a live holder it takes nothing.
func TestTakeoverRegisterAgainTakesFromDeadHolder(t *testing.T) {
	e := newTakeoverEnv(t)
	a, b := e.worker("A", 2*time.Second), e.worker("B", 2*time.Second)
	ctx := context.Background()
	e.deadWorker("D/8", 62*time.Second, "turn-8")
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	// Asynq's recovery runs the turn on A; its registration was lost.
	orig := withReg(&attempt.Pipeline{W: a.attempts, Jr: attemptJournal(a, nil), Rn: fence.Runner{ID: "turn-8", Retried: 1}, Logger: a.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-8", Queue: e.queue}})
	orig.Tk.AsRegistered(claim.Entry{}, 0)
	a.tk.Tick(ctx)
	if !e.rdb.HExists(ctx, e.prefix+"takeover:turns:"+a.tk.Instance(), "turn-8").Val() {
		t.Fatal("the running turn was not written back while its holder is a dead worker")
	}
	if e.rdb.HExists(ctx, e.prefix+"takeover:turns:D/8", "turn-8").Val() {
		t.Fatal("the dead worker still lists the turn: a claim would take it over")
	}
	// B, whose registration of the turn was lost too, takes nothing from A,
	// and stops its runner.
	other := withReg(&attempt.Pipeline{W: b.attempts, Jr: attemptJournal(b, nil), Rn: fence.Runner{ID: "turn-8"}, Logger: b.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-8", Queue: e.queue}})
	other.Tk.AsRegistered(claim.Entry{}, 0)
	b.tk.Tick(ctx)
	if e.rdb.HExists(ctx, e.prefix+"takeover:turns:"+b.tk.Instance(), "turn-8").Val() {
		t.Fatal("a written-back registration took the turn from a live runner")
	}
	if !other.Rn.IsFenced() || orig.Rn.IsFenced() {
		t.Fatalf("runner stopped: the one without the turn %v, the holder %v; want true, false", other.Rn.IsFenced(), orig.Rn.IsFenced())
	}
}

// A turn whose registration waits for its attempt's next round trip is not
// written back by a beat meanwhile (each beat would write every running
// turn again while turns start): its own round trip registers it.
func TestTakeoverPendingRegistrationNotWrittenBack(t *testing.T) {
	e := newTakeoverEnv(t)
	w := e.worker("A", 2*time.Second)
	ctx := context.Background()
	w.tk.Tick(ctx)
	// The writer's round trips wait for gate.
	gate := make(chan struct{})
	exec := w.writer.Exec
	w.writer.Exec = func(ctx context.Context, ops []store.Op) []error {
		<-gate
		return exec(ctx, ops)
	}
	tr := withReg(&attempt.Pipeline{W: w.attempts, Jr: attemptJournal(w, nil), Rn: fence.Runner{ID: "turn-p"}, Logger: w.log, Actx: ctx, ID: attempt.ID{TaskID: "turn-p", Queue: e.queue}})
	tr.Progress = w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: "p"}, func(error) {}, nil)
	register(tr)
	turns := e.prefix + "takeover:turns:" + w.tk.Instance()
	w.tk.Tick(ctx)
	if e.rdb.HExists(ctx, turns, "turn-p").Val() {
		t.Fatal("a beat wrote back a turn whose registration waits for its round trip")
	}
	close(gate)
	tr.Progress.Flush(ctx)
	if !e.rdb.HExists(ctx, turns, "turn-p").Val() {
		t.Fatal("the turn's round trip did not register it")
	}
	tr.Tk.Unregister()
}

// Of two runners of one turn (both got past their start before either
// registered), the newer one's record stays: a save of the stale one in
// the second before its beat stops it changes nothing, even when the newer
// one already finished the turn.
func TestTakeoverStaleRunnerSaveKeepsNewerRecord(t *testing.T) {
	e := newTakeoverEnv(t)
	a, b := e.worker("A", 2*time.Second), e.worker("B", 2*time.Second)
	ctx := context.Background()
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	begin := func(w *Worker, runner, from string) *attempt.Pipeline {
		return beginRunner(t, w, e.queue, "turn-j", runner, from)
	}
	// The stale runner starts and journals its attempt; the newer one
	// starts before the stale one's registration ran.
	stale := begin(a, "turn-j", "")
	newer := begin(b, claim.TaskID("D/9", "turn-j"), "D/9")
	register(stale)
	if err := stale.Save(ctx); err != nil {
		t.Fatal(err)
	}
	register(newer)
	// The newer runner finishes the turn within the stale one's last beat.
	newer.Jr.Rec().Outcome, newer.Jr.Rec().FinishedAt = record.OutcomeAnswered, time.Now()
	newer.Jr.Current().Outcome = record.OutcomeAnswered
	if err := newer.Save(ctx); err != nil {
		t.Fatal(err)
	}
	// The stale runner, not told yet, journals its progress.
	stale.Jr.Current().Phases = append(stale.Jr.Current().Phases, record.PhaseMark{Phase: "streaming", At: time.Now()})
	_ = stale.Save(ctx)
	rec, err := b.journal.Get(ctx, "turn-j")
	if err != nil {
		t.Fatal(err)
	}
	if rec.Outcome != record.OutcomeAnswered || len(rec.Attempts) != 1 || rec.Attempts[0].TakenOverFrom != "D/9" {
		t.Fatalf("the journal holds outcome %q, attempts %+v; want the newer runner's answered record", rec.Outcome, rec.Attempts)
	}
	// The stale runner stops at its worker's next beat; the newer one not.
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	if !stale.Rn.IsFenced() || newer.Rn.IsFenced() {
		t.Fatalf("stopped: the stale runner %v, the newer %v; want true, false", stale.Rn.IsFenced(), newer.Rn.IsFenced())
	}
}

// Of two runners of one turn, the one that started later holds it even
// when its registration came first: the earlier one's registration takes
// nothing from it and stops the earlier one, whose saves write nothing.
func TestTakeoverLaterStartedRunnerKeepsTurn(t *testing.T) {
	e := newTakeoverEnv(t)
	a, b := e.worker("A", 2*time.Second), e.worker("B", 2*time.Second)
	ctx := context.Background()
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	stale := beginRunner(t, a, e.queue, "turn-k", "turn-k", "")
	newer := beginRunner(t, b, e.queue, "turn-k", claim.TaskID("D/10", "turn-k"), "D/10")
	register(newer)
	if err := newer.Save(ctx); err != nil {
		t.Fatal(err)
	}
	register(stale)
	stale.Progress.Flush(ctx)
	a.tk.Tick(ctx)
	b.tk.Tick(ctx)
	if !stale.Rn.IsFenced() || newer.Rn.IsFenced() {
		t.Fatalf("stopped: the runner that started first %v, the later one %v; want true, false", stale.Rn.IsFenced(), newer.Rn.IsFenced())
	}
	newer.Jr.Rec().Outcome, newer.Jr.Rec().FinishedAt = record.OutcomeAnswered, time.Now()
	if err := newer.Save(ctx); err != nil {
		t.Fatal(err)
	}
	_ = stale.Save(ctx)
	if rec, err := b.journal.Get(ctx, "turn-k"); err != nil || rec.Outcome != record.OutcomeAnswered || rec.Attempts[0].TakenOverFrom != "D/10" {
		t.Fatalf("the journal holds %+v (%v); want the later runner's answered record", rec, err)
	}
	if h, ok, _ := e.st.LiveHolder(ctx, "turn-k", 2*time.Second); !ok || h.Runner != newer.Rn.ID {
		t.Fatalf("the turn's holder is %+v (%v), want the later runner", h, ok)
	}
}

// beginRunner starts a runner of taskID on w as prepare does, up to its
// registration: its start read, and its attempt in its record.
func beginRunner(t *testing.T, w *Worker, queue, taskID, runner, from string) *attempt.Pipeline {
	t.Helper()
	ctx := context.Background()
	tr := &attempt.Pipeline{W: w.attempts, Rn: fence.Runner{ID: runner, From: from}, Logger: w.log, Actx: ctx, Jr: attemptJournal(w, nil), ID: attempt.ID{TaskID: taskID, Queue: queue, Start: time.Now()}}
	tr.Progress = w.writer.NewQueue(record.Conversation{Integration: "test", ChatID: taskID}, func(error) {}, nil)
	tr.Rn.OnFence(func(error) {})
	withReg(tr)
	rec, _, _, err := tr.ReadStart(ctx)
	if err != nil {
		t.Fatal(err)
	}
	rec.TaskID = taskID
	rec.Attempts = append(rec.Attempts, record.Attempt{N: len(rec.Attempts) + 1, Worker: w.cfg.WorkerID, Start: tr.Start,
		TakenOverFrom: from})
	tr.Jr.Begin(rec)
	return tr
}

// attemptJournal is the journal side of an attempt on w, as newTurn makes
// it, with rec (nil: none yet) as its record whose last attempt is the
// attempt's.
func attemptJournal(w *Worker, rec *record.TurnRecord) *journal.Attempt {
	a := journal.NewAttempt(w.journal.saver)
	if rec != nil {
		a.Begin(rec)
	}
	return a
}
