package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Stopping a turn: every test runs two workers.

// slowAnswer is an answer the simulator types one word per token delay: words words.
func slowAnswer(words int) string {
	w := make([]string, words)
	for i := range w {
		w[i] = "word" + string(rune('a'+i%26))
	}
	return strings.Join(w, " ")
}

// slowScript types answer one word per 10ms (real time, under simScale).
func slowScript(answer string) *lettasim.Script {
	return &lettasim.Script{Tokens: true, TokenDelay: simDur(10 * time.Millisecond), Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Let me write a long answer."},
		{Kind: lettasim.Assistant, Text: answer},
	}}
}

// cancel cancels r and returns the one turn's result.
func (e *env) cancel(r queue.CancelRequest) queue.CancelledTurn {
	e.t.Helper()
	res, err := e.client.Cancel(context.Background(), r)
	if err != nil {
		e.t.Fatalf("cancel %+v: %v", r, err)
	}
	if len(res.Turns) != 1 {
		e.t.Fatalf("cancel %+v: %d turns, want 1: %+v", r, len(res.Turns), res)
	}
	return res.Turns[0]
}

// assertCancelledEvent checks a cancelled turn's final event.
func assertCancelledEvent(t *testing.T, final record.ReplyEvent, evs []record.ReplyEvent) {
	t.Helper()
	if final.Type != record.EventError || !final.Permanent || final.StopReason != record.StopReasonCancelled {
		t.Fatalf("final event %+v, want error, permanent, stop_reason cancelled; events %s", final, summarize(evs))
	}
}

// A turn waiting behind a running one is cancelled: it leaves the queue and the chat's line at
// once, is never sent, its final event says cancelled, and the message after it runs after
// the running turn.
func TestCancelWaitingTurn(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("cancel-waiting", slowScript(slowAnswer(60)))
	c := e.conv("cw")
	first := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "one"})
	second := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "two"})
	third := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m3", Text: "three"})
	e.waitEvent(c, first.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta })

	got := e.cancel(queue.CancelRequest{TaskID: second.TaskID, By: "test"})
	if got.Status != queue.CancelDone {
		t.Fatalf("cancel of a waiting turn: %+v, want status cancelled", got)
	}
	final, evs := e.waitFinal(c, second.TaskID, 5*time.Second)
	assertCancelledEvent(t, final, evs)
	if f, _ := e.waitFinal(c, first.TaskID, 30*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("the running turn: %+v, want its answer", f)
	}
	if f, _ := e.waitFinal(c, third.TaskID, 30*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("the turn after the cancelled one: %+v, want its answer", f)
	}
	e.settled()
	if n := e.sim.CountOtid(second.Otid); n != 0 {
		t.Errorf("the cancelled turn reached Letta %d times, want 0", n)
	}
	if r1, r3 := runOf(t, e.sim, agent, first.Otid), runOf(t, e.sim, agent, third.Otid); r3.Started.Before(r1.Ended) {
		t.Errorf("the third message's run started at %v, before the first one's ended at %v", r3.Started, r1.Ended)
	}
	if _, err := e.insp.GetTaskInfo(e.queue, second.TaskID); !errors.Is(err, asynq.ErrTaskNotFound) {
		t.Errorf("the cancelled task is still in Asynq (err %v)", err)
	}
	rec := e.record(second.TaskID)
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseWaiting || rec.Cancel.By != "test" {
		t.Errorf("journal: outcome %q cancel %+v, want cancelled in phase waiting by test", rec.Outcome, rec.Cancel)
	}
	if n := countFinal(e.events(c, second.TaskID)); n != 1 {
		t.Errorf("%d final events for the cancelled turn, want 1", n)
	}
}

// A running turn is cancelled mid-stream: the worker running it asks Letta to cancel (the
// conversation's cancel, or the agent endpoint's cancel of its run), the stream ends with
// stop_reason cancelled, and the final event carries what the agent had said. It is sent once,
// never retried (completed with the cancelled result, no retry used: a cancel is no failure in
// Asynq's metrics), and the chat's next message runs after it.
func TestCancelRunningTurn(t *testing.T) {
	for _, mode := range []queue.ThreadMode{queue.ThreadConversation, queue.ThreadAgent} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, withThreadMode(mode))
			e.startWorker("w1")
			e.startWorker("w2")
			answer := slowAnswer(300)
			agent := e.sim.CreateAgent("cancel-running", slowScript(answer))
			c := e.conv("cr")
			first := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "one"})
			next := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "two [[sim answer=short]]"})
			e.waitEvent(c, first.TaskID, func(ev record.ReplyEvent) bool {
				return ev.Type == record.EventAnswerDelta && !ev.Narration
			})
			got := e.cancel(queue.CancelRequest{Otid: first.Otid})
			if got.Status != queue.CancelAsked {
				t.Fatalf("cancel of a running turn: %+v, want status cancelling", got)
			}
			final, evs := e.waitFinal(c, first.TaskID, 20*time.Second)
			assertCancelledEvent(t, final, evs)
			if final.Text == "" || final.Text == answer || !strings.HasPrefix(answer, final.Text) {
				t.Errorf("final text %q: want what the agent had said, a beginning of its answer", final.Text)
			}
			if f, _ := e.waitFinal(c, next.TaskID, 30*time.Second); f.Type != record.EventAnswer {
				t.Fatalf("the next message: %+v, want its answer", f)
			}
			e.settled()
			ep := lettasim.EndpointConvCancel
			if mode == queue.ThreadAgent {
				ep = lettasim.EndpointCancel
			}
			if n := e.sim.Requests().ByEndpoint[ep].Requests; n < 1 {
				t.Errorf("Letta's cancel (%v) was called %d times", ep, n)
			}
			r1 := runOf(t, e.sim, agent, first.Otid)
			if r1.Status != "cancelled" || r1.StopReason != "cancelled" {
				t.Errorf("run %+v, want cancelled", r1)
			}
			if r2 := runOf(t, e.sim, agent, next.Otid); r2.Started.Before(r1.Ended) {
				t.Errorf("the next message's run started at %v, before the cancelled one's ended at %v", r2.Started, r1.Ended)
			}
			if n := e.sim.CountOtid(first.Otid); n != 1 {
				t.Errorf("the cancelled turn's message was stored %d times, want 1", n)
			}
			assertCompletedCancelled(t, e, first.TaskID)
			rec := e.record(first.TaskID)
			if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseStreaming || len(rec.Attempts) != 1 {
				t.Errorf("journal: outcome %q cancel %+v attempts %d: want cancelled while streaming, one attempt", rec.Outcome, rec.Cancel, len(rec.Attempts))
			}
			if n := countFinal(e.events(c, first.TaskID)); n != 1 {
				t.Errorf("%d final events, want 1", n)
			}
		})
	}
}

// A turn whose stream was lost is followed (continuation); cancelled then, it ends cancelled
// as Letta says, and is never resent.
func TestCancelInContinuation(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	answer := slowAnswer(400)
	agent := e.sim.CreateAgent("cancel-cont", slowScript(answer))
	c := e.conv("cc")
	first := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "one [[sim disconnect_after=8]]"})
	e.waitEvent(c, first.TaskID, func(ev record.ReplyEvent) bool {
		return ev.Type == record.EventPhase && (ev.Phase == record.PhaseRecovering || ev.Phase == record.PhaseContinuing)
	})
	if got := e.cancel(queue.CancelRequest{TaskID: first.TaskID}); got.Status != queue.CancelAsked {
		t.Fatalf("cancel: %+v, want cancelling", got)
	}
	final, evs := e.waitFinal(c, first.TaskID, 20*time.Second)
	assertCancelledEvent(t, final, evs)
	e.settled()
	if n := e.sim.SendAttempts(first.Otid); n != 1 {
		t.Errorf("the message was sent %d times, want 1 (never resent)", n)
	}
	if r := runOf(t, e.sim, agent, first.Otid); r.Status != "cancelled" {
		t.Errorf("run %+v, want cancelled", r)
	}
	rec := e.record(first.TaskID)
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseContinuation || rec.Resends != 0 {
		t.Errorf("journal: outcome %q cancel %+v resends %d: want cancelled in continuation, no resend", rec.Outcome, rec.Cancel, rec.Resends)
	}
}

// A cancel that meets a turn already answered says so and changes nothing: no cancel record
// is left, the journal and the reply stream are as they were.
func TestCancelAfterAnswered(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("cancel-answered", nil)
	c := e.conv("ca")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hi"})
	if f, _ := e.waitFinal(c, res.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("final %+v", f)
	}
	e.settled()
	before := e.record(res.TaskID)
	nEvents := len(e.events(c, ""))
	got := e.cancel(queue.CancelRequest{TaskID: res.TaskID})
	if got.Status != queue.CancelAnswered || got.Outcome != record.OutcomeAnswered {
		t.Fatalf("cancel of an answered turn: %+v, want status answered, outcome answered", got)
	}
	if n, _ := e.rdb.Exists(context.Background(), e.prefix+"cancel:"+res.TaskID).Result(); n != 0 {
		t.Error("a cancel record was left for an answered turn")
	}
	after := e.record(res.TaskID)
	if after.Outcome != before.Outcome || !after.UpdatedAt.Equal(before.UpdatedAt) {
		t.Errorf("journal changed: %q at %v, was %q at %v", after.Outcome, after.UpdatedAt, before.Outcome, before.UpdatedAt)
	}
	if n := len(e.events(c, "")); n != nEvents {
		t.Errorf("%d events in the stream, were %d", n, nEvents)
	}
	if _, err := e.client.Cancel(context.Background(), queue.CancelRequest{TaskID: "turn:test:nobody:nothing"}); !errors.Is(err, queue.ErrNotFound) {
		t.Errorf("cancel of an unknown id: %v, want ErrNotFound", err)
	}
}

// A cancel that races the end of the run delivers whichever Letta says happened, once: the
// answer when the run completed first, cancelled when Letta cancelled it.
func TestCancelRacingRunEnd(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	answer := slowAnswer(20)
	agent := e.sim.CreateAgent("cancel-race", slowScript(answer))
	seen := map[string]int{}
	for i := range 12 {
		c := e.conv("race")
		res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "hi"})
		e.waitEvent(c, res.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta && !ev.Narration })
		time.Sleep(time.Duration(i) * 12 * time.Millisecond) // the run ends about 100ms after its first word
		got := e.cancel(queue.CancelRequest{TaskID: res.TaskID})
		final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
		e.settled()
		if n := countFinal(e.events(c, res.TaskID)); n != 1 {
			t.Fatalf("try %d: %d final events, want 1: %s", i, n, summarize(evs))
		}
		run := runOf(t, e.sim, agent, res.Otid)
		rec := e.record(res.TaskID)
		switch {
		case run.Status == "cancelled":
			assertCancelledEvent(t, final, evs)
			if rec.Outcome != record.OutcomeCancelled {
				t.Errorf("try %d: journal %q, want cancelled", i, rec.Outcome)
			}
		case run.Status == "completed":
			if final.Type != record.EventAnswer || final.Text != answer || rec.Outcome != record.OutcomeAnswered {
				t.Errorf("try %d: run completed, final %+v journal %q: want the answer", i, final, rec.Outcome)
			}
		default:
			t.Fatalf("try %d: run %+v", i, run)
		}
		seen[run.Status+"/"+string(got.Status)]++
	}
	t.Logf("outcomes (run status/cancel status): %v", seen)
}

// Durable: a cancel accepted while the worker running the turn goes away is carried out by
// the attempt that recovers the turn on the other worker: it reads the record at its start,
// cancels the run it finds in the journal, and follows it to its end; never resent.
func TestCancelCarriedOutByRecoveringAttempt(t *testing.T) {
	for _, mode := range []queue.ThreadMode{queue.ThreadConversation, queue.ThreadAgent} {
		t.Run(string(mode), func(t *testing.T) { testCancelCarriedOutByRecoveringAttempt(t, mode) })
	}
}

func testCancelCarriedOutByRecoveringAttempt(t *testing.T, mode queue.ThreadMode) {
	e := newEnv(t, withThreadMode(mode))
	stops := map[string]func(){"w1": e.startWorker("w1")}
	agent := e.sim.CreateAgent("cancel-durable", slowScript(slowAnswer(1500)))
	c := e.conv("cd")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "one"})
	e.waitEvent(c, res.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta && !ev.Narration })
	stops["w2"] = e.startWorker("w2")
	// w1 shuts down: it stops hearing cancels at once, and interrupts the turn a little
	// before its shutdown timeout; Asynq puts it back and w2 recovers it.
	stopped := make(chan struct{})
	go func() { stops["w1"](); close(stopped) }()
	time.Sleep(200 * time.Millisecond)
	if got := e.cancel(queue.CancelRequest{TaskID: res.TaskID}); got.Status != queue.CancelAsked {
		t.Fatalf("cancel: %+v, want cancelling", got)
	}
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	<-stopped
	assertCancelledEvent(t, final, evs)
	if final.Text == "" {
		t.Error("the final event carries nothing of what the agent said")
	}
	e.settled()
	if n := e.sim.SendAttempts(res.Otid); n != 1 {
		t.Errorf("sent %d times, want 1", n)
	}
	rec := e.record(res.TaskID)
	last := rec.Attempts[len(rec.Attempts)-1]
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseContinuation ||
		len(rec.Attempts) != 2 || last.Worker != "w2" {
		t.Errorf("journal: outcome %q cancel %+v attempts %s: want cancelled by w2's attempt in continuation", rec.Outcome, rec.Cancel, describeAttempts(rec))
	}
	ep := lettasim.EndpointConvCancel
	if mode == queue.ThreadAgent {
		ep = lettasim.EndpointCancel // with the run's id, from the journal
	}
	if n := e.sim.Requests().ByEndpoint[ep].Requests; n < 1 {
		t.Errorf("Letta's cancel (%v) was called %d times", ep, n)
	}
	if r := runOf(t, e.sim, agent, res.Otid); r.Status != "cancelled" {
		t.Errorf("run %+v, want cancelled", r)
	}
}

// A chat's running turn is cancelled by its chat (--chat), and with All its waiting ones too.
func TestCancelChat(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("cancel-chat", slowScript(slowAnswer(300)))
	c := e.conv("chat")
	first := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "one"})
	second := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "two"})
	e.waitEvent(c, first.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta })
	res, err := e.client.Cancel(context.Background(), queue.CancelRequest{Chat: &c, AgentID: agent, All: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Turns) != 2 || res.Turns[0].TaskID != first.TaskID || res.Turns[0].Status != queue.CancelAsked ||
		res.Turns[1].TaskID != second.TaskID || res.Turns[1].Status != queue.CancelDone {
		t.Fatalf("cancel --chat --all: %+v", res)
	}
	for _, id := range []string{first.TaskID, second.TaskID} {
		final, evs := e.waitFinal(c, id, 20*time.Second)
		assertCancelledEvent(t, final, evs)
	}
	e.settled()
	if n := e.sim.CountOtid(second.Otid); n != 0 {
		t.Errorf("the waiting turn reached Letta %d times", n)
	}
}

// The cancel record alone ends the turn at its next attempt's start, before anything is sent:
// at the head of its line (the start's reads with the acquire), and behind a running turn (the
// acquire's not-your-turn does not put it back: it leaves the line). Each is never sent, ends
// cancelled, completes with the cancelled result without a retry, and the chat's next message runs.
func TestCancelRecordEndsTheNextAttempt(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	agent := e.sim.CreateAgent("cancel-record", slowScript(slowAnswer(100)))
	ctx := context.Background()
	putCancel := func(taskID string) {
		if err := e.rdb.Set(ctx, e.prefix+"cancel:"+taskID, `{"by":"by-hand"}`, time.Hour).Err(); err != nil {
			t.Fatal(err)
		}
	}
	check := func(c record.Conversation, res queue.EnqueueResult) {
		t.Helper()
		final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
		assertCancelledEvent(t, final, evs)
		if n := e.sim.SendAttempts(res.Otid); n != 0 {
			t.Errorf("%s was sent %d times, want 0", res.TaskID, n)
		}
		rec := e.record(res.TaskID)
		if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseWaiting || rec.Cancel.By != "by-hand" {
			t.Errorf("journal: outcome %q cancel %+v, want cancelled while waiting, by-hand", rec.Outcome, rec.Cancel)
		}
	}

	// At the head of its line, before any worker runs.
	c1 := e.conv("head")
	head := e.enqueue(queue.Message{AgentID: agent, Conversation: c1, MessageID: "m1", Text: "one"})
	after := e.enqueue(queue.Message{AgentID: agent, Conversation: c1, MessageID: "m2", Text: "two [[sim answer=ok]]"})
	putCancel(head.TaskID)
	e.startWorker("w1")
	e.startWorker("w2")
	check(c1, head)
	if f, _ := e.waitFinal(c1, after.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("the message after: %+v", f)
	}

	// Behind a running turn, woken by hand.
	c2 := e.conv("behind")
	running := e.enqueue(queue.Message{AgentID: agent, Conversation: c2, MessageID: "m1", Text: "one"})
	waiting := e.enqueue(queue.Message{AgentID: agent, Conversation: c2, MessageID: "m2", Text: "two"})
	last := e.enqueue(queue.Message{AgentID: agent, Conversation: c2, MessageID: "m3", Text: "three [[sim answer=ok]]"})
	e.waitEvent(c2, running.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta })
	putCancel(waiting.TaskID)
	if err := e.insp.RunTask(e.queue, waiting.TaskID); err != nil {
		t.Fatal(err)
	}
	check(c2, waiting)
	for _, r := range []queue.EnqueueResult{running, last} {
		if f, _ := e.waitFinal(c2, r.TaskID, 30*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: %+v, want its answer", r.TaskID, f)
		}
	}
	// It ended at once, not when its turn came.
	var order []string
	for _, ev := range e.events(c2, "") {
		if countFinal([]record.ReplyEvent{ev}) == 1 {
			order = append(order, ev.TaskID)
		}
	}
	if len(order) != 3 || order[0] != waiting.TaskID {
		t.Errorf("final events in the order %v: want the cancelled turn's first", order)
	}
	e.settled()
	for _, id := range []string{head.TaskID, waiting.TaskID} {
		assertCompletedCancelled(t, e, id)
	}
}

// A turn cancelled while its attempt prepares (here: while its Letta conversation is being
// created) is never sent: the send's check finds the cancel, and the turn ends cancelled in
// the phase before_send.
func TestCancelBeforeSend(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	creating, release := make(chan struct{}, 1), make(chan struct{})
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.TrimSuffix(r.URL.Path, "/") == "/v1/conversations" {
			select {
			case creating <- struct{}{}:
			default:
			}
			<-release
		}
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	e.lettaURL = front.URL
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("cancel-before-send", nil)
	c := e.conv("bs")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hi"})
	select {
	case <-creating:
	case <-time.After(20 * time.Second):
		t.Fatal("the turn never asked for its conversation")
	}
	if got := e.cancel(queue.CancelRequest{TaskID: res.TaskID}); got.Status != queue.CancelAsked {
		t.Fatalf("cancel: %+v, want cancelling (its attempt is active)", got)
	}
	close(release) // (the publish, or else the send's own read of the record, stops it)
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	assertCancelledEvent(t, final, evs)
	e.settled()
	if n := e.sim.SendAttempts(res.Otid); n != 0 {
		t.Errorf("sent %d times, want 0", n)
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseBeforeSend {
		t.Errorf("journal: outcome %q cancel %+v, want cancelled before send", rec.Outcome, rec.Cancel)
	}
	assertCompletedCancelled(t, e, res.TaskID)
}

// Durable, with a killed process: the worker running the turn is SIGKILLed, the cancel is
// accepted while nobody runs the turn (recorded before it is acknowledged), and the attempt
// that recovers the turn (a surviving worker's takeover, ~5 s after the kill; Asynq's lease
// recovery, ~1 min, with takeover off) reads the record, cancels the run the journal names
// (agent endpoint, by run id) and follows it to its end: cancelled, never sent again. The test
// still lasts about a minute: it waits for the queue to settle, and the dead worker's original
// task stays active until Asynq recovers it.
func TestProcessKilledThenCancelled(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for the queue to settle after a kill (~1 min)")
	}
	t.Parallel()
	e := newEnv(t)
	lease := envOrderLease + "=2s"
	b := e.spawnWorker("B", lease)
	b.signal(syscall.SIGSTOP) // A takes the turn
	a := e.spawnWorker("A", lease)
	agent := e.sim.CreateAgent("kill-cancel", nil)
	c := e.conv("kill-cancel")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k1",
		Text: fmt.Sprintf("[[sim think=%s answer=never]] think long", simDur(10*time.Minute))})
	e.waitAttempt(res.TaskID, 1, "streaming")
	b.signal(syscall.SIGCONT)
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	got := e.cancel(queue.CancelRequest{TaskID: res.TaskID, By: "test"})
	if got.Status != queue.CancelAsked {
		t.Fatalf("cancel: %+v, want cancelling (the task is active until Asynq recovers it)", got)
	}
	t0 := time.Now()
	time.Sleep(2 * time.Second)
	e.spawnWorker("C", lease) // (B takes the turn over first; C is there for Asynq's recovery)
	final, evs := e.waitFinal(c, res.TaskID, 150*time.Second)
	assertCancelledEvent(t, final, evs)
	t.Logf("cancelled %v after the cancel was accepted", time.Since(t0).Round(time.Second))
	e.settled()
	if n := e.sim.SendAttempts(res.Otid); n != 1 {
		t.Errorf("sent %d times, want 1", n)
	}
	if r := runOf(t, e.sim, agent, res.Otid); r.Status != "cancelled" {
		t.Errorf("run %+v, want cancelled", r)
	}
	rec := e.record(res.TaskID)
	last := rec.Attempts[len(rec.Attempts)-1]
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseContinuation || last.Worker == "A" {
		t.Errorf("journal: outcome %q cancel %+v attempts %s", rec.Outcome, rec.Cancel, describeAttempts(rec))
	}
	if n := e.sim.Requests().ByEndpoint[lettasim.EndpointCancel].Requests; n < 1 {
		t.Errorf("the agent endpoint's cancel was called %d times", n)
	}
}

// A turn cancelled between attempts after a send whose fate is unknown (here a 503 after the
// intent was journaled) is not dropped as if it never ran: an attempt starts at once, finds the
// cancel, and never sends (the message is not at Letta: it ends before the send).
func TestCancelBetweenAttemptsAfterASend(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("cancel-between", nil)
	c := e.conv("between")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "[[sim status=503 times=4]] hi"})
	waitState(t, e, res.TaskID, asynq.TaskStateRetry, 20*time.Second)
	if got := e.cancel(queue.CancelRequest{TaskID: res.TaskID}); got.Status != queue.CancelAsked {
		t.Fatalf("cancel: %+v, want cancelling (an attempt carries it out)", got)
	}
	final, evs := e.waitFinal(c, res.TaskID, 10*time.Second)
	assertCancelledEvent(t, final, evs)
	e.settled()
	if n := e.sim.CountOtid(res.Otid); n != 0 {
		t.Errorf("stored %d times, want 0", n)
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.Phase != record.CancelPhaseBeforeSend || len(rec.Attempts) != 2 {
		t.Errorf("journal: outcome %q cancel %+v attempts %s: want cancelled before its second send", rec.Outcome, rec.Cancel, describeAttempts(rec))
	}
}

// assertCompletedCancelled: the cancelled turn's task completed (a normal ending: not archived,
// which asynqmon and asynq_tasks_failed_total count as a failure), never retried, with the
// cancelled outcome as its result.
func assertCompletedCancelled(t *testing.T, e *env, id string) {
	t.Helper()
	info, err := e.insp.GetTaskInfo(e.queue, id)
	if err != nil || info.State != asynq.TaskStateCompleted || info.Retried != 0 {
		if err != nil {
			t.Errorf("task %s: %v, want it completed", id, err)
		} else {
			t.Errorf("task %s: %s, retried %d, last error %q; want completed, never retried", id, info.State, info.Retried, info.LastErr)
		}
		return
	}
	var r queue.TurnResult
	if err := json.Unmarshal(info.Result, &r); err != nil || r.Outcome != record.OutcomeCancelled {
		t.Errorf("task %s: result %s (%v), want outcome cancelled", id, info.Result, err)
	}
}
