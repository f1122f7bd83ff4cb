package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Waiting is a state, not a retry: a turn that waits parks
// (revoked from Asynq, enqueued again scheduled WaitCheck ahead), is woken
// by the event that frees its line, never goes to Retry, uses no retry and
// journals one wait, not an attempt per look.

// stateWatch samples the Asynq states of tasks (as the monitor shows them)
// every few milliseconds until stopped.
type stateWatch struct {
	mu     sync.Mutex
	seen   map[string][]string // distinct consecutive states, "missing" for not found
	gone   map[string]time.Duration
	since  map[string]time.Time
	stop   chan struct{}
	done   chan struct{}
	states map[string]string
}

func watchStates(e *env, ids ...string) *stateWatch {
	w := &stateWatch{seen: map[string][]string{}, gone: map[string]time.Duration{}, since: map[string]time.Time{},
		states: map[string]string{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for {
			for _, id := range ids {
				st := "missing"
				if info, err := e.insp.GetTaskInfo(e.queue, id); err == nil {
					st = info.State.String()
					if info.LastErr != "" {
						st += " (" + info.LastErr + ")"
					}
				}
				w.mu.Lock()
				now := time.Now()
				if st == "missing" {
					if w.since[id].IsZero() {
						w.since[id] = now
					}
					w.gone[id] = max(w.gone[id], now.Sub(w.since[id]))
				} else {
					w.since[id] = time.Time{}
				}
				if s := w.seen[id]; len(s) == 0 || s[len(s)-1] != st {
					w.seen[id] = append(s, st)
				}
				w.states[id] = st
				w.mu.Unlock()
			}
			select {
			case <-w.stop:
				return
			case <-time.After(5 * time.Millisecond): // the sampling rate, not a wait
			}
		}
	}()
	return w
}

func (w *stateWatch) state(id string) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.states[id]
}

// check stops the watch and fails the test if a task went through Retry or
// an error, or was in no Asynq queue for longer than a park takes.
func (w *stateWatch) check(t *testing.T) {
	t.Helper()
	close(w.stop)
	<-w.done
	for id, states := range w.seen {
		for _, s := range states {
			if strings.HasPrefix(s, "retry") || strings.Contains(s, "(") {
				t.Errorf("task %s went through %v", id, states)
				break
			}
		}
		if g := w.gone[id]; g > time.Second {
			t.Errorf("task %s was in no Asynq queue for %v (states %v)", id, g, states)
		}
	}
}

// checkWaited checks a waiting turn's end: completed, no retry used, one
// attempt, a closed wait behind behind (and at most one more, behind what
// came after it: an approval's answer turn), started within a second of
// freed (the end of what it waited for).
func checkWaited(t *testing.T, e *env, taskID, behind string, freed time.Time) *record.TurnRecord {
	t.Helper()
	rec := e.record(taskID)
	if len(rec.Attempts) != 1 {
		t.Errorf("%s: %d attempts, want 1: %s", taskID, len(rec.Attempts), describeAttempts(rec))
	}
	if n := len(rec.Waits); n < 1 || n > 2 || rec.Waits[0].Behind != behind || rec.Waits[n-1].Until.IsZero() {
		t.Errorf("%s: waits %+v, want a closed wait behind %s", taskID, rec.Waits, behind)
	} else if d := rec.Waits[n-1].Until.Sub(freed); d < 0 || d > time.Second {
		t.Errorf("%s started %v after what it waited for ended, want within 1s", taskID, d)
	}
	info, err := e.insp.GetTaskInfo(e.queue, taskID)
	for deadline := time.Now().Add(5 * time.Second); err == nil && info.State == asynq.TaskStateActive && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
		info, err = e.insp.GetTaskInfo(e.queue, taskID)
	}
	if err != nil || info.State != asynq.TaskStateCompleted || info.Retried != 0 {
		t.Errorf("%s: %+v, %v; want completed with 0 retries", taskID, info, err)
	}
	return rec
}

// TestWaitingBehindATurnParks: m2 and m3 wait behind m1, a turn of 70 s
// (time scaled by 1/20: 3.5 s). Their safety net is short (WaitCheck
// 150 ms) so that they look again many times while they wait: each look
// parks them again. What the monitor shows at t = 1 s and t = 60 s
// (scaled) is logged and checked: scheduled, with the reason in the
// journal; never Retry, never an error, never gone. Each is woken in order
// within a second of the turn ahead's end, with no retry used, one
// attempt and one wait in its journal.
func TestWaitingBehindATurnParks(t *testing.T) {
	t.Parallel()
	const scale = 20
	e := newEnv(t)
	short := func(c *queue.WorkerConfig) { c.Ordering.WaitCheck = 150 * time.Millisecond }
	e.startWorker("w1", short)
	e.startWorker("w2", short)
	agent := e.sim.CreateAgent("park", nil)
	c := e.conv("park")
	t0 := time.Now()
	r1 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: fmt.Sprintf("[[sim think=%s]] hello m1", simDur(70*time.Second/scale))})
	// The client schedules them WaitCheck ahead too (10 min by default).
	ob := e.ordering()
	ob.WaitCheck = 150 * time.Millisecond
	cl, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: time.Hour, Replies: e.replies, Ordering: ob})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Close() })
	var r2, r3 queue.EnqueueResult
	for i, r := range []*queue.EnqueueResult{&r2, &r3} {
		if *r, err = cl.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: c, MessageID: fmt.Sprint("m", i+2), Text: fmt.Sprint("hello m", i+2)}); err != nil {
			t.Fatal(err)
		}
	}
	w := watchStates(e, r1.TaskID, r2.TaskID, r3.TaskID)
	for _, at := range []time.Duration{time.Second, 60 * time.Second} {
		time.Sleep(time.Until(t0.Add(at / scale)))
		rec, _ := e.journal.Get(context.Background(), r2.TaskID)
		var waits []record.Wait
		if rec != nil {
			waits = rec.Waits
		}
		info, err := e.insp.GetTaskInfo(e.queue, r2.TaskID)
		st := w.state(r2.TaskID)
		t.Logf("t=%v (scaled): m2 in the monitor: %s (next process at in %v, retried %v, last error %q; %v); journal waits %+v",
			at, st, func() time.Duration {
				if info == nil {
					return 0
				}
				return time.Until(info.NextProcessAt).Round(time.Millisecond)
			}(), func() int {
				if info == nil {
					return -1
				}
				return info.Retried
			}(), func() string {
				if info == nil {
					return ""
				}
				return info.LastErr
			}(), err, waits)
		switch {
		case at == time.Second && info != nil && info.State != asynq.TaskStateScheduled:
			t.Errorf("t=%v: m2 is %v, want scheduled (its first look is %v after its enqueue)", at, info.State, ob.WaitCheck)
		case at > time.Second && (len(waits) != 1 || waits[0].Behind != r1.TaskID || !strings.Contains(waits[0].Reason, r1.TaskID)):
			t.Errorf("t=%v: m2's waits %+v, want one behind %s", at, waits, r1.TaskID)
		}
	}
	for _, r := range []queue.EnqueueResult{r1, r2, r3} {
		if f, evs := e.waitFinal(c, r.TaskID, 30*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: final %+v; %s", r.TaskID, f, summarize(evs))
		}
	}
	e.settled()
	w.check(t)
	t.Logf("states: %v", w.seen)
	rec1 := e.record(r1.TaskID)
	rec2 := checkWaited(t, e, r2.TaskID, r1.TaskID, rec1.FinishedAt)
	rec3 := e.record(r3.TaskID)
	if len(rec3.Attempts) != 1 || len(rec3.Waits) < 1 || len(rec3.Waits) > 2 || rec3.Waits[0].Behind != r1.TaskID {
		t.Errorf("m3: attempts %s, waits %+v; want 1 attempt, waits behind m1 (then m2)", describeAttempts(rec3), rec3.Waits)
	}
	if d := rec3.FirstStartedAt.Sub(rec2.FinishedAt); d < 0 || d > time.Second {
		t.Errorf("m3 started %v after m2 ended, want within 1s", d)
	}
	checkOrder(t, e.sim, agent, []string{"m1", "m2", "m3"})
	checkSerialRuns(t, e.sim, agent, 3)
}

// TestWaitingBehindAnApprovalParks: a message sent while its chat's
// approval request is open waits (one awaiting_approval event), parked,
// looking again every WaitCheck (short here); it is woken within a second
// of the end of the answer turn (approved) or of the expiry's turn, never
// in Retry, no retry used, one attempt and one wait behind the request in
// its journal.
func TestWaitingBehindAnApprovalParks(t *testing.T) {
	for _, how := range []string{"answered", "expired"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := approvalEnv(t, func(c *queue.WorkerConfig) {
				c.Ordering.WaitCheck = 150 * time.Millisecond
				if how == "expired" {
					c.Approvals.Timeout = 2 * time.Second
				}
			})
			agent := e.sim.CreateAgent("park-appr", nil)
			c := e.conv("park-appr")
			req, _ := e.requestApproval(agent, c, "m1", "delete_file")
			msg := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello"})
			w := watchStates(e, msg.TaskID)
			e.waitEvent(c, msg.TaskID, func(ev record.ReplyEvent) bool {
				return ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval
			})
			ansID := queue.AnswerTaskID(req.TaskID)
			if how == "answered" {
				time.Sleep(time.Second) // it waits, looking again every 150 ms
				ans, err := e.client.Approve(context.Background(), req.TaskID, "")
				if err != nil {
					t.Fatal(err)
				}
				ansID = ans.TaskID
			}
			if f, evs := e.waitFinal(c, msg.TaskID, 30*time.Second); f.Type != record.EventAnswer {
				t.Fatalf("message: %+v; %s", f, summarize(evs))
			}
			e.settled()
			w.check(t)
			ans := e.record(ansID)
			checkWaited(t, e, msg.TaskID, "approval request "+req.TaskID, ans.FinishedAt)
			n := 0
			for _, ev := range e.events(c, msg.TaskID) {
				if ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d awaiting_approval events, want 1", n)
			}
			if n := e.sim.CountOtid(msg.Otid); n != 1 {
				t.Errorf("the message was sent %d times", n)
			}
		})
	}
}

// TestWaitingBehindAnApprovalParksWithoutOrdering: with ordering off
// (LETTAQ_ORDERING=off) a message sent while its chat's approval request
// is open parks too: scheduled, never in Retry, no retry used, one attempt
// and one wait behind the request in its journal, however often it looks
// again ("answered": WaitCheck 150 ms). It is woken within a second of the
// answer, or of the expiry; with a safety net of an hour ("woken",
// "expired") only the wake-up can start it that soon.
func TestWaitingBehindAnApprovalParksWithoutOrdering(t *testing.T) {
	for _, how := range []string{"answered", "woken", "expired"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withThreadMode(queue.ThreadConversation), withoutOrdering())
			mod := func(c *queue.WorkerConfig) {
				c.Ordering.WaitCheck = time.Hour
				switch how {
				case "answered":
					c.Ordering.WaitCheck = 150 * time.Millisecond
				case "expired":
					c.Approvals.Timeout = 2 * time.Second
				}
			}
			e.startWorker("w1", mod)
			e.startWorker("w2", mod)
			agent := e.sim.CreateAgent("park-appr-off", nil)
			c := e.conv("park-appr-off")
			req, _ := e.requestApproval(agent, c, "m1", "delete_file")
			msg := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello"})
			w := watchStates(e, msg.TaskID)
			e.waitEvent(c, msg.TaskID, func(ev record.ReplyEvent) bool {
				return ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval
			})
			if how != "expired" {
				time.Sleep(time.Second) // it waits ("answered": looking again every 150 ms)
				// "woken" (its safety net an hour away) sits scheduled; "answered"
				// looks again every 150 ms, so it may be caught in a look
				// (pending, active, or parked in no queue for a moment): never
				// in Retry (watchStates checks every state it goes through).
				info, err := e.insp.GetTaskInfo(e.queue, msg.TaskID)
				looking := how == "answered" && (errors.Is(err, asynq.ErrTaskNotFound) ||
					err == nil && (info.State == asynq.TaskStatePending || info.State == asynq.TaskStateActive))
				if !looking && (err != nil || info.State != asynq.TaskStateScheduled || info.Retried != 0) {
					t.Errorf("the waiting message: %s, %v; want scheduled, 0 retries", taskState(info), err)
				}
				if rec, err := e.journal.Get(context.Background(), msg.TaskID); err != nil {
					t.Errorf("the waiting message's journal: %v", err)
				} else if len(rec.Attempts) != 0 || len(rec.Waits) != 1 {
					t.Errorf("the waiting message's journal: attempts %s, waits %+v; want no attempt, one wait", describeAttempts(rec), rec.Waits)
				}
				if _, err := e.client.Approve(context.Background(), req.TaskID, ""); err != nil {
					t.Fatal(err)
				}
			}
			if f, evs := e.waitFinal(c, msg.TaskID, 30*time.Second); f.Type != record.EventAnswer {
				t.Fatalf("message: %+v; %s", f, summarize(evs))
			}
			e.settled()
			w.check(t)
			t.Logf("states: %v", w.seen)
			// Without ordering nothing holds the message behind the answer
			// turn: it is freed when the request is recorded answered.
			ar := e.record(req.TaskID).Approval
			if ar == nil || ar.AnsweredAt.IsZero() {
				t.Fatalf("the request's journal has no answer: %+v", ar)
			}
			rec := checkWaited(t, e, msg.TaskID, "approval request "+req.TaskID, ar.AnsweredAt)
			if len(rec.Waits) != 1 {
				t.Errorf("waits %+v, want one", rec.Waits)
			}
			n := 0
			for _, ev := range e.events(c, msg.TaskID) {
				if ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval {
					n++
				}
			}
			if n != 1 {
				t.Errorf("%d awaiting_approval events, want 1", n)
			}
			if n := e.sim.CountOtid(msg.Otid); n != 1 {
				t.Errorf("the message was sent %d times", n)
			}
		})
	}
}

// taskState says a task's state for a failure message (nil: none).
func taskState(info *asynq.TaskInfo) string {
	if info == nil {
		return "none"
	}
	return fmt.Sprintf("%v (retried %d of %d, last error %q, next process at in %v)", info.State, info.Retried, info.MaxRetry,
		info.LastErr, time.Until(info.NextProcessAt).Round(time.Millisecond))
}
