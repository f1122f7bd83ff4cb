package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestRedisRestart checks the README's production note "run Redis with
// appendonly yes and a queued message survives a restart; a crash or deploy
// never sends a user message twice" against a real restart: a Redis of the
// test's own (appendonly yes, appendfsync always) is shut down cleanly while
// turn A is in flight at the agent and turn Q waits behind it in the queue,
// kept down, and started again on the same port with the same data. Then
// turn B joins A's conversation and turn C another one. Each of A, Q, B and
// C must get exactly one answer, each user message must reach the agent
// exactly once, in the order A, Q, B, the journal must say answered, and
// nothing may be left in the queue or in the ordering lines.
func TestRedisRestart(t *testing.T) {
	cases := []struct {
		name string
		// think: how long A's agent thinks before it answers, from the send.
		// outage: how long Redis stays down.
		think, outage time.Duration
		// answerDuringOutage: A's run ends while Redis is down (its final
		// event can only be written after Redis returns); otherwise A is
		// still streaming when Redis comes back.
		answerDuringOutage bool
	}{
		{name: "while-streaming", think: 4 * time.Second, outage: 1500 * time.Millisecond},
		// A short outage ends before the worker gets to A's answer: each of
		// its Redis writes that fails spends go-redis's dial retries (about
		// 2 s), so the attempt is still on its way when Redis is back, and
		// delivers.
		{name: "answer-during-outage", think: 500 * time.Millisecond, outage: 2 * time.Second, answerDuringOutage: true},
		// A longer one does not: the delivery fails while Redis is down (or
		// in the second after, when go-redis still fails every dial at once),
		// the attempt ends for a retry, and Asynq must hear of that once
		// Redis is back. It used to record it with a write that failed, for
		// good: A stayed active until Asynq's lease recovery, 60-120 s.
		{name: "answer-during-long-outage", think: 500 * time.Millisecond, outage: 8 * time.Second, answerDuringOutage: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			runRedisRestart(t, tc.think, tc.outage, tc.answerDuringOutage)
		})
	}
}

// asynqRecovery bounds how long Asynq v0.26 takes to run again a task that
// is active while no worker runs it: its lease (30 s) ends, the recoverer
// waits 30 s more (clock skew) and runs once a minute.
//
// Q can be such a task. It waits behind A, put back and taken again every
// 200 ms to 1 s, so a worker may be taking it off the queue at the very
// moment Redis shuts down: Redis runs Asynq's dequeue script (Q is active,
// and the append-only file keeps it so) but exits before the reply is sent,
// and the worker never gets Q. Nothing is lost or sent twice; Q, and B
// behind it, are only late.
const asynqRecovery = 2 * time.Minute

func runRedisRestart(t *testing.T, think, outage time.Duration, answerDuringOutage bool) {
	t0 := time.Now()
	rs := testredis.StartPersistent(t)
	e := newEnv(t, withRedis(rs.Server()))
	e.startWorker("w1")
	agent := e.sim.CreateAgent("restart", nil)
	otherAgent := e.sim.CreateAgent("restart-other", nil)
	conv, otherConv := e.conv("restart"), e.conv("restart-other")
	msg := func(agent string, c record.Conversation, mark string, think time.Duration) queue.Message {
		return queue.Message{AgentID: agent, Conversation: c, MessageID: mark,
			Text: fmt.Sprintf("[[sim think=%s answer=answer-%s]] %s", simDur(think), mark, mark)}
	}

	a := e.enqueue(msg(agent, conv, "A", think))
	wctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	sentA, err := e.sim.WaitOtid(wctx, a.Otid)
	cancel()
	if err != nil {
		t.Fatalf("turn A never reached the agent: %v", err)
	}
	// Q is queued behind A: it must survive the restart and run after A.
	// It waits as a scheduled task (woken by A's end); Redis stops once it
	// is there.
	q := e.enqueue(msg(agent, conv, "Q", 100*time.Millisecond))
	if q.Position != 1 {
		t.Errorf("Q joined its line at position %d, want 1 (behind A)", q.Position)
	}
	waitState(t, e, q.TaskID, asynq.TaskStateScheduled, 10*time.Second)

	// The outage. Nothing can be enqueued meanwhile (a client cannot reach
	// Redis either); the worker goes on streaming A from the agent.
	stoppedAt := time.Now()
	if err := rs.Stop(); err != nil {
		t.Fatalf("stop redis: %v", err)
	}
	time.Sleep(outage) // the outage itself, not a synchronisation
	if err := rs.Start(); err != nil {
		t.Fatalf("start redis again: %v", err)
	}
	upAt := time.Now()
	t.Logf("redis down for %v", upAt.Sub(stoppedAt).Round(time.Millisecond))

	b := e.enqueue(msg(agent, conv, "B", 100*time.Millisecond))
	c := e.enqueue(msg(otherAgent, otherConv, "C", 100*time.Millisecond))
	if !answerDuringOutage && b.Position != 2 {
		// (When A's answer was ready during the outage, A and Q may be done
		// already.)
		t.Errorf("B joined its line at position %d, want 2 (behind A, still streaming, and Q)", b.Position)
	}

	type turnCase struct {
		mark  string
		res   queue.EnqueueResult
		agent string
		conv  record.Conversation
	}
	turns := []turnCase{{"A", a, agent, conv}, {"Q", q, agent, conv}, {"B", b, agent, conv}, {"C", c, otherAgent, otherConv}}
	seq, err := ordering.New(e.rdb, e.ordering().Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	t.Cleanup(func() {
		// On failure, where each turn is (Redis still runs: cleanups run last
		// registered first).
		if !t.Failed() {
			return
		}
		for _, tu := range turns {
			if info, err := e.insp.GetTaskInfo(e.queue, tu.res.TaskID); err != nil {
				t.Logf("%s: task info: %v", tu.mark, err)
			} else {
				t.Logf("%s: task %s, retried %d/%d, next %v, last error %q", tu.mark, info.State, info.Retried, info.MaxRetry,
					info.NextProcessAt.Format(time.RFC3339Nano), info.LastErr)
			}
		}
		if servers, err := e.insp.Servers(); err == nil {
			for _, srv := range servers {
				for _, w := range srv.ActiveWorkers {
					t.Logf("worker %s runs %s (started %v)", srv.ID, w.TaskID, w.Started.Format(time.RFC3339Nano))
				}
			}
		}
		key := e.ordering().Key(queue.Message{AgentID: agent, Conversation: conv})
		head, herr := seq.Head(ctx, key)
		n, lerr := seq.Len(ctx, key)
		holder, _, oerr := seq.Holder(ctx, key)
		t.Logf("line of A, Q, B: head %q, %d in line, held by %q (%v %v %v)", head, n, holder, herr, lerr, oerr)
		t.Logf("redis-server:\n%s", rs.Logs())
	})
	answered := map[string]time.Time{}
	for _, tu := range turns {
		wait := 30 * time.Second
		if tu.mark == "Q" || tu.mark == "B" {
			wait += asynqRecovery
		}
		final, evs := e.waitFinal(tu.conv, tu.res.TaskID, wait)
		if final.Type != record.EventAnswer || final.Text != "answer-"+tu.mark {
			t.Errorf("%s: final %s %q, want answer %q; events %s", tu.mark, final.Type, final.Text, "answer-"+tu.mark, summarize(evs))
		}
		answered[tu.mark] = final.Time
		t.Logf("%s answered %v after Redis was back", tu.mark, final.Time.Sub(upAt).Round(time.Millisecond))
	}
	e.settled() // no attempt left that could write a late second answer
	if late := answered["Q"].Sub(upAt); late > 30*time.Second {
		// Only Asynq's lease recovery may have made Q that late.
		info, err := e.insp.GetTaskInfo(e.queue, q.TaskID)
		if err != nil || !strings.Contains(info.LastErr, "lease expired") {
			t.Errorf("Q answered %v after Redis was back, and not after Asynq's lease recovery (task %+v, %v)", late, info, err)
		} else {
			t.Logf("Q was taken off the queue as Redis shut down: Asynq's lease recovery ran it %v after Redis was back", late.Round(time.Second))
		}
	}

	// Exactly one final event per turn in the whole streams, and nothing else
	// final in them.
	for _, cv := range []record.Conversation{conv, otherConv} {
		all := e.events(cv, "")
		finals := map[string]int{}
		for _, ev := range all {
			if countFinal([]record.ReplyEvent{ev}) == 1 {
				finals[ev.TaskID]++
			}
		}
		for _, tu := range turns {
			if tu.conv == cv && finals[tu.res.TaskID] != 1 {
				t.Errorf("%s: %d final events; stream %s", tu.mark, finals[tu.res.TaskID], summarize(all))
			}
			delete(finals, tu.res.TaskID)
		}
		if len(finals) > 0 {
			t.Errorf("final events of unknown turns in %s: %v", cv, finals)
		}
	}

	// One user message per otid at the agent; A, Q, B in order, one run at a
	// time.
	for _, tu := range turns {
		if n := e.sim.CountOtid(tu.res.Otid); n != 1 {
			t.Errorf("%s: otid stored %d times at the agent", tu.mark, n)
		}
	}
	checkOrder(t, e.sim, agent, []string{"A", "Q", "B"})
	checkSerialRuns(t, e.sim, agent, 3)
	checkSerialRuns(t, e.sim, otherAgent, 1)

	// The outage did fall where the case says: A's message was stored before
	// Redis stopped, and its run ended during the outage or after Redis was
	// back.
	runA := runOf(t, e.sim, agent, a.Otid)
	switch {
	case !sentA.At.Before(stoppedAt):
		t.Errorf("A's message was stored %v after Redis stopped", sentA.At.Sub(stoppedAt))
	case answerDuringOutage && !(runA.Ended.After(stoppedAt) && runA.Ended.Before(upAt)):
		t.Errorf("A's run ended %v after Redis stopped, not during the %v outage", runA.Ended.Sub(stoppedAt), upAt.Sub(stoppedAt))
	case !answerDuringOutage && !runA.Ended.After(upAt):
		t.Errorf("A's run ended %v before Redis was back: it was not streaming across the restart", upAt.Sub(runA.Ended))
	}

	// The journal survived and says answered.
	for _, tu := range turns {
		rec := e.record(tu.res.TaskID)
		if rec.Outcome != record.OutcomeAnswered || rec.Otid != tu.res.Otid || rec.Conversation != tu.conv {
			t.Errorf("journal of %s: outcome %q otid %q conversation %v; %s", tu.mark, rec.Outcome, rec.Otid, rec.Conversation, describeAttempts(rec))
		}
		t.Logf("journal of %s: %d attempt(s): %s", tu.mark, len(rec.Attempts), describeAttempts(rec))
	}

	// The ordering lines are empty and no conversation is held.
	for _, tu := range turns[2:] {
		key := e.ordering().Key(queue.Message{AgentID: tu.agent, Conversation: tu.conv})
		n, err := seq.Len(ctx, key)
		holder, _, herr := seq.Holder(ctx, key)
		if err != nil || herr != nil || n != 0 || holder != "" {
			t.Errorf("line %s: %d waiting, held by %q (%v, %v)", key, n, holder, err, herr)
		}
	}
	t.Logf("case done in %v", time.Since(t0).Round(time.Millisecond))
}

// waitState waits until the task is in state.
func waitState(t *testing.T, e *env, taskID string, state asynq.TaskState, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		info, err := e.insp.GetTaskInfo(e.queue, taskID)
		if err == nil && info.State == state {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("task %s not %s within %v: %+v, %v", taskID, state, timeout, info, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// runOf returns the agent's run started by otid.
func runOf(t *testing.T, sim *lettasim.Server, agent, otid string) lettasim.RunInfo {
	t.Helper()
	for _, r := range sim.Runs(agent) {
		if r.Otid == otid {
			return r
		}
	}
	t.Fatalf("no run of agent %s for otid %s", agent, otid)
	return lettasim.RunInfo{}
}
