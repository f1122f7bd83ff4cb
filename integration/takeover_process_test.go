package integration

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"context"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// takenTurn is a turn a test kills its worker under, and what it should
// answer.
type takenTurn struct {
	name   string
	res    queue.EnqueueResult
	conv   record.Conversation
	answer string
}

// checkTakenOver waits for the turn's answer after its worker died at t0
// and checks that a takeover continued it: one final event, one message
// with its otid at the simulator, the last attempt a takeover on another
// worker, and the takeover task used none of the turn's retries. It
// returns the takeover time (death to the takeover attempt's start) and
// the time to the answer.
func (e *env) checkTakenOver(tc takenTurn, dead string, t0 time.Time) (takeover, answered time.Duration) {
	e.t.Helper()
	final, evs := e.waitFinal(tc.conv, tc.res.TaskID, 30*time.Second)
	answered = time.Since(t0)
	if final.Type != record.EventAnswer || final.Text != tc.answer {
		e.t.Fatalf("%s: final %+v; %s", tc.name, final, summarize(evs))
	}
	rec := e.record(tc.res.TaskID)
	last := rec.Attempts[len(rec.Attempts)-1]
	if len(rec.Attempts) < 2 || rec.Attempts[0].Worker != dead || last.Worker == dead || last.TakenOverFrom == "" ||
		!strings.HasPrefix(last.TakenOverFrom, dead+"/") || last.SentOtid || rec.Otid != tc.res.Otid {
		e.t.Fatalf("%s: journal: %s (last %+v)", tc.name, describeAttempts(rec), last)
	}
	takeover = last.Start.Sub(t0)
	if n := countFinal(e.events(tc.conv, tc.res.TaskID)); n != 1 {
		e.t.Errorf("%s: %d final events", tc.name, n)
	}
	if n := e.sim.CountOtid(tc.res.Otid); n != 1 {
		e.t.Errorf("%s: %d messages with its otid at the simulator, want 1", tc.name, n)
	}
	orig, err := e.insp.GetTaskInfo(e.queue, tc.res.TaskID)
	if err != nil {
		e.t.Fatal(err)
	}
	ti, err := e.insp.GetTaskInfo(e.queue, "takeover:"+last.TakenOverFrom+":"+tc.res.TaskID)
	if err != nil {
		e.t.Fatalf("%s: the takeover task: %v", tc.name, err)
	}
	if ti.Retried != 0 || ti.MaxRetry != orig.MaxRetry-orig.Retried {
		e.t.Errorf("%s: takeover task retried %d, max retry %d; the original's %d/%d: a retry was used",
			tc.name, ti.Retried, ti.MaxRetry, orig.Retried, orig.MaxRetry)
	}
	e.t.Logf("%s: taken over %v after SIGKILL, answered %v after: %s", tc.name, takeover.Round(time.Millisecond),
		answered.Round(time.Millisecond), describeAttempts(rec))
	return takeover, answered
}

// The takeover figure: three workers; the one
// that runs three turns (one mid-stream, one mid-continuation, one
// mid-approval-answer) is killed with SIGKILL; the two survivors continue
// each turn within seconds, under its otid and journal record, without a
// second message at the simulator and without using a retry.
func TestProcessTakeoverAfterSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	takeovers := killThreeTurns(t, true)
	if max := takeovers[len(takeovers)-1]; max > 15*time.Second {
		t.Errorf("takeover took %v, want < 15s", max)
	}
	if med := takeovers[len(takeovers)/2]; med > 10*time.Second {
		t.Errorf("median takeover %v, want ≤ 10s", med)
	}
}

// The figure before: the same run with takeover off, where the killed
// worker's turns wait for Asynq's recovery (its lease, and the survivors'
// recoverer, due a minute after their start).
func TestProcessTakeoverOffWaitsForAsynq(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for Asynq's lease recovery (~1-2 min)")
	}
	t.Parallel()
	killThreeTurns(t, false)
}

// killThreeTurns runs three turns on worker A (one mid-stream, one
// mid-continuation, one mid-approval-answer), starts B and C, SIGKILLs A,
// checks each turn is answered once, and logs and returns the takeover
// times (death to the next attempt's start), sorted.
func killThreeTurns(t *testing.T, takeover bool) []time.Duration {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	env := []string{envThreadMode + "=" + string(queue.ThreadConversation)}
	if !takeover {
		env = append(env, envTakeover+"=off")
	}
	a := e.spawnWorker("A", env...)
	think := simDur(6 * time.Second)
	agent := e.sim.CreateAgent("tk-stream", nil)
	agent2 := e.sim.CreateAgent("tk-cont", nil)
	agent3 := e.sim.CreateAgent("tk-appr", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.ApprovalRequest, ToolName: "delete_file"},
		{Kind: lettasim.Reasoning, Text: "Deleting.", Delay: think},
		{Kind: lettasim.Assistant, Text: "deleted after the takeover"},
	}})
	c, c2, c3 := e.conv("tk-stream"), e.conv("tk-cont"), e.conv("tk-appr")
	req := e.enqueue(queue.Message{AgentID: agent3, Conversation: c3, MessageID: "m1", Text: "tidy up"})
	if final, evs := e.waitFinal(c3, req.TaskID, 20*time.Second); final.Type != record.EventApprovalRequired {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	stream := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k-stream",
		Text: fmt.Sprintf("[[sim think=%s answer=stream-survived]] one", think)})
	cont := e.enqueue(queue.Message{AgentID: agent2, Conversation: c2, MessageID: "k-cont",
		Text: fmt.Sprintf("[[sim think=%s answer=cont-survived stall=forever stall_after=1 resume=410]] two", think)})
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	e.waitAttempt(stream.TaskID, 1, "streaming")
	e.waitAttempt(cont.TaskID, 1, "continuing")
	e.waitAttempt(ans.TaskID, 1, "streaming")
	// The survivors start now, so that A holds all three turns.
	e.spawnWorker("B", env...)
	e.spawnWorker("C", env...)
	t0 := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	var takeovers, answers []time.Duration
	for _, tc := range []takenTurn{{"mid-stream", stream, c, "stream-survived"}, {"mid-continuation", cont, c2, "cont-survived"},
		{"mid-approval-answer", ans, c3, "deleted after the takeover"}} {
		var tk, an time.Duration
		if takeover {
			tk, an = e.checkTakenOver(tc, "A", t0)
		} else {
			tk, an = e.checkRecovered(tc, "A", t0)
		}
		takeovers, answers = append(takeovers, tk), append(answers, an)
	}
	if msgs := e.sim.ApprovalMessages(agent3); len(msgs) != 1 || msgs[0].Otid != ans.Otid {
		t.Errorf("approval messages %+v", msgs)
	}
	if n := e.sim.SendAttempts(ans.Otid); n != 1 {
		t.Errorf("the approval answer was sent %d times", n)
	}
	// Every finished turn left the registry (with its last writes): the
	// survivors list nothing, the dead worker's list went with its claim.
	deadline := time.Now().Add(5 * time.Second)
	for {
		keys, err := e.rdb.Keys(context.Background(), e.prefix+"takeover:turns:*").Result()
		if err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("finished turns still registered: %v", keys)
		}
		time.Sleep(20 * time.Millisecond)
	}
	slices.Sort(takeovers)
	slices.Sort(answers)
	how := "takeover on (5s)"
	if !takeover {
		how = "takeover off (Asynq's recovery)"
	}
	t.Logf("%s: continued after SIGKILL (death → next attempt starts), %d turns: min %v, median %v, max %v; answered: min %v, median %v, max %v; user messages per otid at the simulator: 1",
		how, len(takeovers), takeovers[0].Round(time.Millisecond), takeovers[len(takeovers)/2].Round(time.Millisecond),
		takeovers[len(takeovers)-1].Round(time.Millisecond), answers[0].Round(time.Millisecond),
		answers[len(answers)/2].Round(time.Millisecond), answers[len(answers)-1].Round(time.Millisecond))
	return takeovers
}

// checkRecovered is checkTakenOver for a turn Asynq recovered (takeover
// off): answered once, its next attempt on another worker.
func (e *env) checkRecovered(tc takenTurn, dead string, t0 time.Time) (recovered, answered time.Duration) {
	e.t.Helper()
	final, evs := e.waitFinal(tc.conv, tc.res.TaskID, 150*time.Second)
	answered = time.Since(t0)
	if final.Type != record.EventAnswer || final.Text != tc.answer {
		e.t.Fatalf("%s: final %+v; %s", tc.name, final, summarize(evs))
	}
	rec := e.record(tc.res.TaskID)
	if len(rec.Attempts) < 2 || rec.Attempts[0].Worker != dead || rec.Attempts[1].Worker == dead || rec.Attempts[1].TakenOverFrom != "" {
		e.t.Fatalf("%s: journal: %s", tc.name, describeAttempts(rec))
	}
	if n := e.sim.CountOtid(tc.res.Otid); n != 1 {
		e.t.Errorf("%s: %d messages with its otid at the simulator, want 1", tc.name, n)
	}
	recovered = rec.Attempts[1].Start.Sub(t0)
	e.t.Logf("%s: recovered %v after SIGKILL, answered %v after: %s", tc.name, recovered.Round(time.Millisecond),
		answered.Round(time.Millisecond), describeAttempts(rec))
	return recovered, answered
}

// takeoverTasks lists the takeover tasks in the env's queue, in any state.
func (e *env) takeoverTasks() []string {
	e.t.Helper()
	var ids []string
	for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){e.insp.ListPendingTasks,
		e.insp.ListActiveTasks, e.insp.ListScheduledTasks, e.insp.ListRetryTasks, e.insp.ListCompletedTasks, e.insp.ListArchivedTasks} {
		tasks, err := list(e.queue)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, ti := range tasks {
			if ti.Type == queue.TakeoverTaskType {
				ids = append(ids, ti.ID)
			}
		}
	}
	return ids
}

// Fencing: the worker running a turn is stopped
// (SIGSTOP) past the takeover time; a survivor takes the turn over and
// answers; the stopped worker, resumed (SIGCONT), finds it was taken over,
// stops the turn and writes nothing: one final event, nothing after it,
// one message with the otid at the simulator, the journal as the takeover
// left it.
func TestProcessTakeoverFencesPausedWorker(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t)
	a := e.spawnWorker("A")
	agent := e.sim.CreateAgent("tk-pause", nil)
	c := e.conv("tk-pause")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "p1",
		Text: fmt.Sprintf("[[sim think=%s answer=answered-once]] hello", simDur(4*time.Second))})
	e.waitAttempt(res.TaskID, 1, "streaming")
	e.spawnWorker("B")
	e.spawnWorker("C")
	t0 := time.Now()
	a.signal(syscall.SIGSTOP)
	e.checkTakenOver(takenTurn{"paused", res, c, "answered-once"}, "A", t0)
	rec := e.record(res.TaskID)
	a.signal(syscall.SIGCONT)
	// A finds its tombstone at its next beat (1s), or before its next
	// write (its beat is stale).
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(a.out.String(), "taken for dead") && !strings.Contains(a.out.String(), "turn taken over by another worker") {
		if time.Now().After(deadline) {
			t.Fatalf("the resumed worker never said it stopped the taken-over turn:\n%s", tail(a.out.String(), 3000))
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(2 * time.Second) // whatever A would still write
	evs := e.events(c, res.TaskID)
	if n := countFinal(evs); n != 1 {
		t.Fatalf("%d final events: %s", n, summarize(evs))
	}
	if evs[len(evs)-1].Type != record.EventAnswer {
		t.Fatalf("events after the final one: %s", summarize(evs))
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("%d messages with the otid at the simulator", n)
	}
	after := e.record(res.TaskID)
	if after.Outcome != record.OutcomeAnswered || len(after.Attempts) != len(rec.Attempts) {
		t.Fatalf("the journal changed after the takeover answered: %s → %s", describeAttempts(rec), describeAttempts(after))
	}
	for _, l := range strings.Split(a.out.String(), "\n") {
		if strings.Contains(l, "turn finished") || strings.Contains(l, "turn attempt ends, retrying") {
			t.Errorf("the resumed worker ended the turn itself: %s", l)
		}
	}
	e.settled()
}
