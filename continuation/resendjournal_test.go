package continuation_test

import (
	"context"
	"errors"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// A resend whose intent cannot be journaled is not sent, and the decision
// says so: not "resent", not a failure the queue archives (it retries a
// Failed turn only when nothing was sent), but the first send's
// NotAdmitted, which the queue retries (the next attempt looks for the
// otid, then may resend). The send was answered 503 before anything was
// stored; the journal fails on the resend.
func TestResendNotJournaledIsRetried(t *testing.T) {
	e := newEnv(t, nil, func(b *budget.Config) { b.ResendPolicy = budget.ResendIfNotAdmitted })
	e.sim.SetFault(e.agent, lettasim.Fault{Status5xxBeforeStore: 503})
	journalDown := errors.New("journal: redis: connection refused")
	h := continuation.Hooks{BeforeSend: func(_ context.Context, resend bool) error {
		if resend {
			return journalDown
		}
		return nil
	}}
	tu := e.turn("hello")
	st := agentclient.NewStreamState()
	ctx, cancel := context.WithTimeout(context.Background(), e.b.TaskTimeout())
	defer cancel()
	d := runTurn(ctx, e.runner, tu, st, h)
	if n := e.sim.CountOtid(tu.Otid); n != 0 {
		t.Fatalf("stored %d messages with the otid, want 0", n)
	}
	t.Logf("outcome=%v sends=%d resend=%q reason=%q", d.Outcome, d.Sends, d.Resend, d.Reason)
	if d.Resend == continuation.ResendSent {
		t.Errorf("resend %q: the resend was never sent", d.Resend)
	}
	if d.Outcome != continuation.NotAdmitted || !errors.Is(d.Err, journalDown) {
		t.Errorf("outcome %v err %v: want not_admitted (retried by the queue) with the journal's error", d.Outcome, d.Err)
	}

	// The next attempt (the journal back) looks, then resends: one message.
	tu.PriorIntent = true
	d = e.run(t, tu, st, 1)
	if d.Outcome != continuation.Completed || d.Resend != continuation.ResendSent {
		t.Errorf("next attempt: outcome %v resend %q (%s)", d.Outcome, d.Resend, d.Reason)
	}
}
