package attempt

// The attempt's gates before it runs: its place in its chat's line
// (acquire) and its chat's open approval request (approvalGate).

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
)

// acquire runs the ordering part of an attempt before the turn: the
// attempt's place (t.Line) holds the lease when it returns without done;
// else err is what the handler returns (done is set when the handler
// should end now with err, which may be nil).
func (t *Pipeline) acquire(ctx context.Context) (err error, done bool) {
	alive := t.Line.Alive(t.W.Takeover.Alive)
	if t.W.Trips.StartWithLock {
		// The acquire and the start's reads in one round trip: the reads
		// run after the acquire, so with the lock taken by it they are what
		// readStart would read after it. The round trip is the writer's
		// (progress.Queue.Do), shared with what the other turns write then.
		// (The op's results are its own variables: when do stops waiting,
		// the writer may still run it.)
		var a *ordering.Acquiring
		var aerr error
		var pre *store.StartReads
		op := func(octx context.Context, p redis.Pipeliner, sha bool) func() error {
			if sha { // (a second round is only for scripts that failed: none here)
				if a, aerr = t.Line.AcquireIn(octx, p); aerr == nil {
					pre = t.W.startStores().QueueStartReads(octx, p, p, t.startRead())
				}
			}
			return func() error { return nil } // each command has its own error, read below
		}
		if derr := t.Progress.Do(ctx, nil, op); derr != nil {
			// Not run, or not waited for (ctx ended): a lock it took
			// goes to this task's next attempt (the lock knows the task).
			return t.End.retryEarly(fmt.Errorf("ordering: acquire: %w", derr)), true
		}
		if pre != nil {
			// The cancel record, read after the acquire whatever it
			// answered: a cancelled turn that is not its chat's turn ends
			// below instead of being put back.
			if b, found, _ := pre.Cancel(); found {
				t.Cx.NoteJSON(b, (*cancelRun)(t))
			}
		}
		if err = aerr; err == nil {
			var first bool
			if first, err = t.Line.Take(ctx, a, alive); err == nil && first {
				t.Pre = pre
			}
		}
	} else {
		t.Cx.Read(ctx, (*cancelRun)(t)) // (the start's reads come after the acquire here)
		err = t.Line.Acquire(ctx, alive)
	}
	var me *ordering.MergedError
	switch {
	case err == nil:
		return nil, false
	case errors.As(err, &me):
		return t.End.coalesced(ctx, me.Into), true
	case errors.Is(err, ordering.ErrDone):
		t.Logger.Info("turn already finished (duplicate delivery)")
		return nil, true
	case ordering.IsNotYourTurn(err) && t.Cx.Asked() != nil:
		return t.End.cancelWaiting(ctx, err), true
	case ordering.IsNotYourTurn(err):
		t.Line.WakeAfterDeadHeads(ctx, err)
		if perr := t.Waiting().parkNotYourTurn(ctx, err); perr != nil {
			return perr, true // parked: it waits, woken by the turn ahead
		}
		// Put back: not a failure, no retry used (ordering.IsFailure),
		// unless the task has none left (after a crash: see outOfRetries).
		if t.End.noRetryLeft(err) {
			return t.End.GiveUp("its turn did not come: " + err.Error()), true
		}
		return err, true
	}
	return t.End.retryEarly(fmt.Errorf("ordering: %w", err)), true
}

// approvalGate applies the approval gate (approval.Turn.Gate): an answer
// turn goes on with its answers; a message that meets its chat's
// unanswered request waits for it (awaitApproval) or fails. end is true
// when the attempt ends here.
func (t *Pipeline) approvalGate(ctx context.Context) (answers []agentclient.ApprovalAnswer, err error, end bool) {
	g := t.Ap.Gate(ctx, t.Pre, t.Jr.Current().N == 1)
	log := t.Logger
	if g.Open != nil {
		log = log.With(slog.String("request_task_id", g.Open.RequestTaskID))
	}
	switch {
	case g.Err != nil:
		return nil, t.End.retryEarly(g.Err), true
	case g.Fail != "":
		return nil, t.End.fail(ctx, log, g.Fail, ""), true
	case g.Wait:
		return nil, t.Waiting().awaitApproval(ctx, log, g.Open), true
	}
	return g.Answers, nil, false
}
