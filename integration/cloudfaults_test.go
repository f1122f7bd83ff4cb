package integration

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Letta Cloud's error vocabulary (WIRE.md, "Errors Letta Cloud returns
// today"), each answered by the simulator: the outcome at the chat, the attempts in the journal,
// and the user messages per otid at the simulator.

func hasPhaseEvent(evs []record.ReplyEvent, phase record.ReplyPhase) bool {
	for _, ev := range evs {
		if ev.Type == record.EventPhase && ev.Phase == phase {
			return true
		}
	}
	return false
}

func historyReads(sim *lettasim.Server) int64 {
	r := sim.Requests()
	return r.Get(lettasim.EndpointListMessages).Requests + r.Get(lettasim.EndpointConvMessages).Requests
}

// A deploy's 503 (admitted false, Retry-After 2s) twice: each refused attempt is journaled
// "not admitted (the server said so)", the next sends again with the same otid after the
// Retry-After without reading the history; the answer comes with one message at Letta.
func TestCloudDeploy503IsSentAgainWithoutSearch(t *testing.T) {
	t.Parallel()
	for _, mode := range []queue.ThreadMode{queue.ThreadAgent, queue.ThreadConversation} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withThreadMode(mode))
			e.startWorker("w1")
			agent := e.sim.CreateAgent("deploying", nil)
			e.sim.SetFault(agent, lettasim.Fault{Deploy503: true, RetryAfter: simDur(2 * time.Second), Times: 2})
			c := e.conv("deploy")
			res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
			final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
			if final.Type != record.EventAnswer {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			rec := e.record(res.TaskID)
			if n, sends := e.sim.CountOtid(res.Otid), e.sim.SendAttempts(res.Otid); n != 1 || sends != 3 || len(rec.Attempts) != 3 {
				t.Fatalf("%d messages for the otid (want 1), %d sends (want 3), attempts: %s", n, sends, describeAttempts(rec))
			}
			for _, a := range rec.Attempts[:2] {
				if a.Outcome != record.OutcomeNotAdmitted || !strings.HasPrefix(a.Error, "not admitted (the server said so)") ||
					!strings.Contains(a.Error, "cloud_api_shutting_down") && !strings.Contains(a.Error, "503") {
					t.Errorf("attempt %d: %s %q", a.N, a.Outcome, a.Error)
				}
			}
			// Asynq keeps a retry's time in whole seconds: 2s is at least 1.
			if gap := rec.Attempts[1].Start.Sub(rec.Attempts[0].End); gap < time.Second {
				t.Errorf("sent again %v after the refusal; Retry-After was 2s; %s", gap, describeAttempts(rec))
			}
			if n := historyReads(e.sim); n != 0 {
				t.Errorf("%d history reads; the server said the message was not admitted", n)
			}
			if !hasPhaseEvent(evs, record.PhaseLettaDeploying) {
				t.Errorf("no %s phase: %s", record.PhaseLettaDeploying, summarize(evs))
			}
		})
	}
}

// Letta's own API rate limit refuses the send, and the history reads too (the
// chat used to see only "recovering" phases for 14 minutes, then "gave up after 26 attempts"): the turn
// says rate_limited, sends again after Retry-After without reading the history, and is answered
// with one message at Letta.
func TestCloudAPIRateLimitIsSentAgainWithoutSearch(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("ratelimited", nil)
	e.sim.SetFault(agent, lettasim.Fault{Status429: true, RetryAfter: simDur(time.Second), Times: 2})
	e.sim.SetListFault(agent, lettasim.ListFault{Fail: 1000, FailStatus: 429})
	c := e.conv("ratelimit")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec := e.record(res.TaskID)
	if n, sends := e.sim.CountOtid(res.Otid), e.sim.SendAttempts(res.Otid); n != 1 || sends != 3 || len(rec.Attempts) != 3 {
		t.Fatalf("%d messages for the otid (want 1), %d sends (want 3), attempts: %s", n, sends, describeAttempts(rec))
	}
	if !hasPhaseEvent(evs, record.PhaseRateLimited) || hasPhaseEvent(evs, record.PhaseRecovering) {
		t.Errorf("phases: want rate_limited and no recovering: %s", summarize(evs))
	}
	if n := historyReads(e.sim); n != 0 {
		t.Errorf("%d history reads; a 429 to the send stored nothing", n)
	}
}

// An absurd Retry-After (an hour) is reported in the attempt's error and not obeyed: the retry
// is due within queue.MaxServerRetryAfter.
func TestCloudAbsurdRetryAfterIsCapped(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("absurd", nil)
	e.sim.SetFault(agent, lettasim.Fault{Status429: true, RetryAfter: simDur(time.Hour)})
	c := e.conv("absurd")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	waitState(t, e, res.TaskID, asynq.TaskStateRetry, 30*time.Second)
	info, err := e.insp.GetTaskInfo(e.queue, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	due := time.Until(info.NextProcessAt)
	if due > queue.MaxServerRetryAfter+time.Second || due < queue.MaxServerRetryAfter-10*time.Second ||
		!strings.Contains(info.LastErr, "Letta asked to wait 1h0m0s (Retry-After), more than the 1m0s cap") {
		t.Fatalf("retry due in %v (cap %v), last error %q", due, queue.MaxServerRetryAfter, info.LastErr)
	}
	if e.sim.CountOtid(res.Otid) != 0 || e.sim.SendAttempts(res.Otid) != 1 {
		t.Fatalf("%d messages, %d sends", e.sim.CountOtid(res.Otid), e.sim.SendAttempts(res.Otid))
	}
}

// A 429 naming an account limit ends the turn at once: one permanent error event naming the
// cause in the user's words, one send, nothing stored, no retries.
func TestCloudQuota429EndsTheTurn(t *testing.T) {
	t.Parallel()
	for code, cause := range map[string]string{
		"not-enough-credits":     "the Letta account is out of credits",
		"premium-usage-exceeded": "the Letta account has used up its premium usage",
	} {
		t.Run(code, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t)
			e.startWorker("w1")
			agent := e.sim.CreateAgent("broke", nil)
			e.sim.SetFault(agent, lettasim.Fault{Status429Code: code, Persistent: true})
			c := e.conv("quota")
			res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
			final, evs := e.waitFinal(c, res.TaskID, 15*time.Second)
			if final.Type != record.EventError || !final.Permanent || !strings.HasPrefix(final.Text, cause) {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			rec := e.record(res.TaskID)
			if n, sends := e.sim.CountOtid(res.Otid), e.sim.SendAttempts(res.Otid); n != 0 || sends != 1 || len(rec.Attempts) != 1 {
				t.Fatalf("%d messages (want 0), %d sends (want 1), attempts: %s", n, sends, describeAttempts(rec))
			}
		})
	}
}

// The model's rate limit (429 llm_rate_limit, no Retry-After): the turn looks for its otid
// (the run may have started), then backs off instead of sending again at once; the next
// attempt sends, and the answer comes with one message at Letta.
func TestCloudModelRateLimitBacksOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.startWorker("w1")
	agent := e.sim.CreateAgent("llm-limited", nil)
	e.sim.SetFault(agent, lettasim.Fault{Status429Code: "llm_rate_limit"})
	c := e.conv("llm")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec := e.record(res.TaskID)
	if n, sends := e.sim.CountOtid(res.Otid), e.sim.SendAttempts(res.Otid); n != 1 || sends != 2 || len(rec.Attempts) != 2 {
		t.Fatalf("%d messages for the otid (want 1), %d sends (want 2), attempts: %s", n, sends, describeAttempts(rec))
	}
	if gap := rec.Attempts[1].Start.Sub(rec.Attempts[0].End); gap < time.Second {
		t.Errorf("sent again %v after the model's rate limit; want a backoff of 2s (at least 1s in Asynq's whole seconds)", gap)
	}
	if !hasPhaseEvent(evs, record.PhaseRateLimited) {
		t.Errorf("no rate_limited phase: %s", summarize(evs))
	}
}

// The newer busy form names no run. Held by the turn's own run (the send was stored, then
// refused busy): found by its otid in the conversation's history and followed, answered in one
// attempt with one message. Held by another run: the turn waits (busy put-backs) and is
// answered with one message.
func TestCloudNewerBusyForm(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		f        lettasim.Fault
		attempts int
	}{
		{"own run, nested", lettasim.Fault{BusyAfterStore: true, BusyForm: "nested"}, 1},
		{"own run, newer", lettasim.Fault{BusyAfterStore: true, BusyForm: "newer"}, 1},
		{"another run", lettasim.Fault{Busy: true, BusyForm: "newer", Times: 2}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, withThreadMode(queue.ThreadConversation))
			e.startWorker("w1")
			agent := e.sim.CreateAgent("busy", nil)
			e.sim.SetFault(agent, tc.f)
			c := e.conv("busy")
			res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
			final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
			if final.Type != record.EventAnswer {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			rec := e.record(res.TaskID)
			if n := e.sim.CountOtid(res.Otid); n != 1 || len(rec.Attempts) != tc.attempts {
				t.Fatalf("%d messages for the otid (want 1), attempts (want %d): %s", n, tc.attempts, describeAttempts(rec))
			}
			for _, a := range rec.Attempts[:tc.attempts-1] {
				if a.Outcome != record.OutcomeBusy {
					t.Errorf("attempt %d: %s, want busy", a.N, a.Outcome)
				}
			}
		})
	}
}
