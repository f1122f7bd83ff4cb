package continuation_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// testBudget is a budget scaled for the simulator's fast clock: the same
// shape as production, in milliseconds.
func testBudget() budget.Config {
	b := budget.Default()
	b.ConnectTimeout = time.Second
	b.StallTimeout = 250 * time.Millisecond
	b.ContentIdleNotice = 0
	b.StreamTotal = 3 * time.Second
	b.StopGrace = 100 * time.Millisecond
	b.AdmissionGrace = 400 * time.Millisecond
	b.ContinuationMax = 4 * time.Second
	b.PollInitial = 10 * time.Millisecond
	b.PollMax = 60 * time.Millisecond
	b.RequestTimeout = time.Second
	b.DeliveryAllowance = time.Second
	b.SafetyMargin = time.Second
	return b
}

type env struct {
	sim    *lettasim.Server
	client *agentclient.Client
	runner *continuation.Runner
	agent  string
	b      budget.Config
}

func newEnv(t *testing.T, script *lettasim.Script, mutate ...func(*budget.Config)) *env {
	t.Helper()
	sim := lettasim.NewServer(lettasim.Config{PingInterval: 40 * time.Millisecond, TimeScale: 0.001})
	t.Cleanup(sim.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: sim.URL, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := testBudget()
	for _, m := range mutate {
		m(&b)
	}
	r, err := continuation.New(continuation.Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	return &env{sim: sim, client: c, runner: r, agent: sim.CreateAgent("t", script), b: b}
}

func (e *env) turn(text string) continuation.Turn {
	return continuation.Turn{AgentID: e.agent, Otid: uuid.NewString(), Text: text, Started: time.Now()}
}

// run runs a turn and checks the invariant every fault test needs: the
// simulator stored exactly `want` user messages with the turn's otid.
func (e *env) run(t *testing.T, tu continuation.Turn, st *agentclient.StreamState, want int) continuation.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.b.TaskTimeout())
	defer cancel()
	d := runTurn(ctx, e.runner, tu, st, continuation.Hooks{})
	if n := e.sim.CountOtid(tu.Otid); n != want {
		t.Fatalf("simulator stored %d user messages with otid %s, want %d (decision %+v)", n, tu.Otid, want, d)
	}
	return d
}

// toolScript: reasoning, a tool call whose return takes toolTime (scaled
// by 0.001), reasoning, answer.
func toolScriptTaking(toolTime time.Duration) *lettasim.Script {
	s := lettasim.ToolScript(toolTime, "The forecast says rain.", "web_search")
	return &s
}

func toolScript() *lettasim.Script { return toolScriptTaking(200 * time.Second) }

func TestHappyPath(t *testing.T) {
	e := newEnv(t, nil)
	st := agentclient.NewStreamState()
	d := e.run(t, e.turn("hello"), st, 1)
	if d.Outcome != continuation.Completed || d.StopReason != "end_turn" || d.Sends != 1 || d.Polls != 0 {
		t.Fatalf("decision %+v", d)
	}
	if st.Answer() != "you said: hello" {
		t.Errorf("answer %q", st.Answer())
	}
}

func TestStallWhileRunContinues(t *testing.T) {
	e := newEnv(t, toolScript())
	e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
	st := agentclient.NewStreamState()
	d := e.run(t, e.turn("weather?"), st, 1)
	if d.Outcome != continuation.Completed || d.Clock != agentclient.ClockStall || d.Evidence != continuation.EvidenceStream {
		t.Fatalf("decision %+v", d)
	}
	if d.Resend == continuation.ResendSent || d.Sends != 1 || d.Polls == 0 {
		t.Errorf("should have polled without resending: %+v", d)
	}
	if st.Answer() != "The forecast says rain." {
		t.Errorf("answer %q", st.Answer())
	}
}

func TestDisconnectMidToolCallNoDuplicateSteps(t *testing.T) {
	for _, tokens := range []bool{false, true} {
		t.Run(map[bool]string{false: "step mode", true: "token mode"}[tokens], func(t *testing.T) {
			sc := toolScript()
			sc.Tokens = tokens
			e := newEnv(t, sc)
			// ping, reasoning, tool call (… and in token mode a few deltas): cut inside the call.
			cut := 3
			if tokens {
				cut = 6
			}
			e.sim.SetFault(e.agent, lettasim.Fault{DisconnectAfter: cut})
			st := agentclient.NewStreamState()
			d := e.run(t, e.turn("weather?"), st, 1)
			if d.Outcome != continuation.Completed || d.Clock != "" {
				t.Fatalf("decision %+v", d)
			}
			tr := st.Snapshot().Transcript
			count := map[agentclient.StepKind]int{}
			for _, s := range tr.Steps {
				count[s.Kind]++
			}
			if count[agentclient.StepToolCall] != 1 || count[agentclient.StepToolReturn] != 1 || count[agentclient.StepAssistant] != 1 {
				t.Fatalf("steps duplicated or lost: %+v", tr.Steps)
			}
			if call := tr.Steps[1]; call.ToolName != "web_search" || call.Arguments == "" {
				t.Errorf("tool call %+v", call)
			}
			if st.Answer() != "The forecast says rain." {
				t.Errorf("answer %q", st.Answer())
			}
		})
	}
}

func TestServerErrorAfterStoreFindsOtid(t *testing.T) {
	e := newEnv(t, nil)
	e.sim.SetFault(e.agent, lettasim.Fault{Status5xxAfterStore: 502})
	st := agentclient.NewStreamState()
	d := e.run(t, e.turn("hi"), st, 1)
	if d.Outcome != continuation.Completed || d.Evidence != continuation.EvidenceHistory || d.Sends != 1 || d.Resend == continuation.ResendSent {
		t.Fatalf("decision %+v", d)
	}
	if d.Lookups == 0 || st.Answer() != "you said: hi" {
		t.Errorf("lookups %d answer %q", d.Lookups, st.Answer())
	}
}

func TestServerErrorBeforeStore(t *testing.T) {
	t.Run("policy if-not-admitted resends with the same otid", func(t *testing.T) {
		e := newEnv(t, nil)
		e.sim.SetFault(e.agent, lettasim.Fault{Status5xxBeforeStore: 503})
		tu := e.turn("hi")
		st := agentclient.NewStreamState()
		d := e.run(t, tu, st, 1)
		if d.Outcome != continuation.Completed || d.Resend != continuation.ResendSent || d.Sends != 2 {
			t.Fatalf("decision %+v", d)
		}
		if um := e.sim.UserMessages(e.agent); len(um) != 1 || um[0].Otid != tu.Otid {
			t.Errorf("stored %+v", um)
		}
	})
	t.Run("policy never: clear permanent outcome, nothing stored", func(t *testing.T) {
		e := newEnv(t, nil, func(b *budget.Config) { b.ResendPolicy = budget.ResendNever })
		e.sim.SetFault(e.agent, lettasim.Fault{Status5xxBeforeStore: 503})
		d := e.run(t, e.turn("hi"), agentclient.NewStreamState(), 0)
		if d.Outcome != continuation.NotAdmitted || d.Resend != continuation.ResendForbidden || d.Sends != 1 {
			t.Fatalf("decision %+v", d)
		}
		if d.Reason == "" {
			t.Error("a forbidden resend must say why")
		}
		// The cause comes first (the monitor shows it as the task's last
		// error), then what the lookup found.
		if !strings.HasPrefix(d.Reason, "send failed: ") || !strings.Contains(d.Reason, "503") ||
			!strings.Contains(d.Reason, "; then no run id and otid") {
			t.Errorf("reason %q does not name the 503 first", d.Reason)
		}
	})
	// A 429 of Letta's own API rate limit refused the send, nothing
	// was stored: no search, the turn is Refused and the next attempt (the
	// queue's, after Retry-After) sends again. (Before, it was looked for,
	// then resent at once into the same rate limit.)
	t.Run("API rate limit 429 is refused, then sent again", func(t *testing.T) {
		e := newEnv(t, nil)
		e.sim.SetFault(e.agent, lettasim.Fault{Status429: true, RetryAfter: 10 * time.Millisecond})
		tu := e.turn("hi")
		d := e.run(t, tu, agentclient.NewStreamState(), 0)
		if d.Outcome != continuation.Refused || d.Lookups != 0 || d.Sends != 1 {
			t.Fatalf("decision %+v", d)
		}
		if d = e.run(t, tu, agentclient.NewStreamState(), 1); d.Outcome != continuation.Completed {
			t.Fatalf("next attempt: decision %+v", d)
		}
	})
}

func TestRunFailures(t *testing.T) {
	cases := []struct {
		stop      string
		retryable bool
	}{{"llm_api_error", true}, {"cancelled", false}, {"max_tokens_exceeded", false}}
	for _, tc := range cases {
		t.Run(tc.stop, func(t *testing.T) {
			e := newEnv(t, toolScript())
			e.sim.SetFault(e.agent, lettasim.Fault{EndWith: tc.stop, EndAfter: 2})
			d := e.run(t, e.turn("x"), agentclient.NewStreamState(), 1)
			if d.Outcome != continuation.Failed || d.StopReason != tc.stop || d.Retryable != tc.retryable || d.Sends != 1 {
				t.Fatalf("decision %+v", d)
			}
		})
	}
	t.Run("failure seen only by polling", func(t *testing.T) {
		e := newEnv(t, toolScript())
		e.sim.SetFault(e.agent, lettasim.Fault{EndWith: "llm_api_error", EndAfter: 3, StallAfter: 2, StallFor: lettasim.Forever})
		d := e.run(t, e.turn("x"), agentclient.NewStreamState(), 1)
		if d.Outcome != continuation.Failed || d.StopReason != "llm_api_error" || d.Polls == 0 {
			t.Fatalf("decision %+v", d)
		}
	})
}

func TestRequiresApprovalIsCompleted(t *testing.T) {
	sc := &lettasim.Script{Steps: []lettasim.Step{{Kind: lettasim.Reasoning, Text: "ask"}, {Kind: lettasim.ApprovalRequest, ToolName: "delete_file"}}}
	e := newEnv(t, sc)
	st := agentclient.NewStreamState()
	d := e.run(t, e.turn("delete it"), st, 1)
	if d.Outcome != continuation.Completed || d.StopReason != "requires_approval" {
		t.Fatalf("decision %+v", d)
	}
	if p := st.Snapshot().Transcript.PendingApprovals(); len(p) != 1 || p[0].ToolName != "delete_file" {
		t.Errorf("pending approvals %+v", p)
	}
}

func TestStillRunningThenPickedUp(t *testing.T) {
	// A turn that thinks for 6 "minutes" (6s scaled ×0.001... i.e. 360ms) with a
	// continuation budget of 150ms: the first attempt runs out of budget.
	sc := lettasim.ThinkingScript(600*time.Second, "finally")
	e := newEnv(t, &sc, func(b *budget.Config) {
		b.ContinuationMax = 150 * time.Millisecond
		b.StreamTotal = 200 * time.Millisecond
		b.StallTimeout = 100 * time.Millisecond
		b.RequestTimeout = 100 * time.Millisecond
	})
	e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 1, StallFor: lettasim.Forever})
	tu := e.turn("think hard")
	st := agentclient.NewStreamState()
	d := e.run(t, tu, st, 1)
	if d.Outcome != continuation.StillRunning || d.RunID == "" {
		t.Fatalf("decision %+v", d)
	}
	// The next attempt (a fresh process: new state, run id from the
	// journal, or none at all) follows the same run and never resends.
	for _, knowRun := range []bool{true, false} {
		st2 := agentclient.NewStreamState()
		if knowRun {
			st2.SetRunID(d.RunID)
		}
		tu.PriorIntent = true
		r2, _ := continuation.New(continuation.Config{Client: e.client, Budget: testBudget()})
		d2 := runTurn(context.Background(), r2, tu, st2, continuation.Hooks{})
		if d2.Outcome != continuation.Completed || d2.RunID != d.RunID || d2.Sends != 0 || st2.Answer() != "finally" {
			t.Fatalf("second attempt (run id known: %v): %+v answer %q", knowRun, d2, st2.Answer())
		}
		if n := e.sim.CountOtid(tu.Otid); n != 1 {
			t.Fatalf("user messages with otid: %d", n)
		}
	}
}

func TestResumeAndFallback(t *testing.T) {
	background := func(b *budget.Config) { b.Background = true; b.Resume = true }
	t.Run("resume a background run after a stall", func(t *testing.T) {
		e := newEnv(t, toolScriptTaking(1000*time.Second), background)
		e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
		st := agentclient.NewStreamState()
		d := e.run(t, e.turn("x"), st, 1)
		if d.Outcome != continuation.Completed || d.Resumes != 1 || d.ResumeRefused {
			t.Fatalf("decision %+v", d)
		}
		if st.Answer() != "The forecast says rain." || len(st.Snapshot().Transcript.Steps) != 5 {
			t.Errorf("answer %q steps %+v", st.Answer(), st.Snapshot().Transcript.Steps)
		}
	})
	for _, status := range []int{400, 410, 503} {
		t.Run("resume refused falls back to polling", func(t *testing.T) {
			e := newEnv(t, toolScriptTaking(1000*time.Second), background)
			e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever, ResumeStatus: status})
			st := agentclient.NewStreamState()
			d := e.run(t, e.turn("x"), st, 1)
			if d.Outcome != continuation.Completed || !d.ResumeRefused || d.Polls < 2 {
				t.Fatalf("status %d: decision %+v", status, d)
			}
			if st.Answer() != "The forecast says rain." {
				t.Errorf("answer %q", st.Answer())
			}
		})
	}
	t.Run("foreground run is polled", func(t *testing.T) {
		e := newEnv(t, toolScript())
		e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
		d := e.run(t, e.turn("x"), agentclient.NewStreamState(), 1)
		if d.Outcome != continuation.Completed || d.Resumes != 0 {
			t.Fatalf("decision %+v", d)
		}
	})
}

func TestTransientListErrorsDoNotEndContinuation(t *testing.T) {
	e := newEnv(t, toolScript())
	e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
	e.sim.SetListFault(e.agent, lettasim.ListFault{Fail: 3})
	d := e.run(t, e.turn("x"), agentclient.NewStreamState(), 1)
	if d.Outcome != continuation.Completed || d.TransientErrors == 0 {
		t.Fatalf("decision %+v", d)
	}
}

func TestUnknownAgentIsRejected(t *testing.T) {
	e := newEnv(t, nil)
	tu := e.turn("x")
	tu.AgentID = "agent-00000000-0000-4000-8000-000000000000" // well-formed, unknown: 404
	d := e.run(t, tu, agentclient.NewStreamState(), 0)
	if d.Outcome != continuation.Rejected || agentclient.StatusCode(d.Err) != 404 || d.Retryable {
		t.Fatalf("decision %+v", d)
	}
}

func TestHooksSeePhasesAndIntentBeforeSend(t *testing.T) {
	e := newEnv(t, toolScript())
	e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
	var mu sync.Mutex
	var phases []continuation.Activity
	intents := 0
	tu := e.turn("x")
	h := continuation.Hooks{
		OnActivity: func(p continuation.Activity) { mu.Lock(); phases = append(phases, p); mu.Unlock() },
		BeforeSend: func(ctx context.Context, resend bool) error {
			if e.sim.CountOtid(tu.Otid) != 0 {
				t.Error("intent journaled after the send")
			}
			intents++
			return nil
		},
	}
	d := runTurn(context.Background(), e.runner, tu, agentclient.NewStreamState(), h)
	if d.Outcome != continuation.Completed || intents != 1 {
		t.Fatalf("decision %+v intents %d", d, intents)
	}
	want := []continuation.Activity{continuation.ActivityConnecting, continuation.ActivityStreaming, continuation.ActivityRecovering, continuation.ActivityContinuing}
	mu.Lock()
	defer mu.Unlock()
	if len(phases) != len(want) {
		t.Fatalf("phases %v, want %v", phases, want)
	}
	for i := range want {
		if phases[i] != want[i] {
			t.Fatalf("phases %v, want %v", phases, want)
		}
	}
}

// TestGateDecisionTable pins the resend gate row by row (see doc.go).
func TestGateDecisionTable(t *testing.T) {
	type row struct {
		name       string
		fault      lettasim.Fault
		listFault  *lettasim.ListFault
		policy     budget.ResendPolicy
		stateRunID bool // an earlier attempt learned the run id
		prior      bool // an earlier attempt journaled an intent
		want       continuation.Outcome
		resend     continuation.ResendVerdict
		stored     int // user messages with the otid at the simulator
	}
	rows := []row{
		{name: "run id known from the stream: follow, never send", stateRunID: true, prior: true, policy: budget.ResendIfNotAdmitted, want: continuation.Completed, stored: 1},
		{name: "otid in history with its run: follow", fault: lettasim.Fault{Status5xxAfterStore: 500}, policy: budget.ResendIfNotAdmitted, want: continuation.Completed, stored: 1},
		{name: "stored but connection dropped before any byte: found, no resend", fault: lettasim.Fault{DropBeforeResponse: true}, policy: budget.ResendIfNotAdmitted, want: continuation.Completed, stored: 1},
		{name: "not in history after the grace, policy allows: resend same otid", fault: lettasim.Fault{Status5xxBeforeStore: 500}, policy: budget.ResendIfNotAdmitted, want: continuation.Completed, resend: continuation.ResendSent, stored: 1},
		{name: "not in history after the grace, policy never: forbidden", fault: lettasim.Fault{Status5xxBeforeStore: 500}, policy: budget.ResendNever, want: continuation.NotAdmitted, resend: continuation.ResendForbidden, stored: 0},
		{name: "prior intent, nothing stored (crash before send), policy allows: send", prior: true, policy: budget.ResendIfNotAdmitted, want: continuation.Completed, resend: continuation.ResendSent, stored: 1},
		{name: "history unreadable for the whole grace: no resend", fault: lettasim.Fault{Status5xxBeforeStore: 500}, listFault: &lettasim.ListFault{Fail: 1000}, policy: budget.ResendIfNotAdmitted, want: continuation.StillRunning, stored: 0},
	}
	for _, rw := range rows {
		t.Run(rw.name, func(t *testing.T) {
			e := newEnv(t, nil, func(b *budget.Config) { b.ResendPolicy = rw.policy })
			tu := e.turn("gate")
			st := agentclient.NewStreamState()
			if rw.stateRunID {
				// A first attempt that streamed, then "crashed".
				first := runTurn(context.Background(), e.runner, tu, agentclient.NewStreamState(), continuation.Hooks{})
				if first.RunID == "" {
					t.Fatalf("setup: %+v", first)
				}
				st.SetRunID(first.RunID)
			}
			if rw.fault != (lettasim.Fault{}) {
				e.sim.SetFault(e.agent, rw.fault)
			}
			if rw.listFault != nil {
				e.sim.SetListFault(e.agent, *rw.listFault)
			}
			tu.PriorIntent = rw.prior
			d := e.run(t, tu, st, rw.stored)
			if d.Outcome != rw.want || d.Resend != rw.resend {
				t.Fatalf("outcome %v resend %q, want %v %q (%+v)", d.Outcome, d.Resend, rw.want, rw.resend, d)
			}
			if d.Resend == continuation.ResendSent && d.Evidence != continuation.EvidenceStream {
				t.Errorf("a resend's decision must carry the resent stream's evidence: %+v", d)
			}
		})
	}
}

// TestOtidFoundBeyondTheFirstPage: later turns pushed the message with the
// otid several pages back; the search pages back (cursor in sort order)
// and finds it, so nothing is resent.
func TestOtidFoundBeyondTheFirstPage(t *testing.T) {
	e := newEnv(t, nil)
	r, err := continuation.New(continuation.Config{Client: e.client, Budget: e.b, HistoryPageSize: 2})
	if err != nil {
		t.Fatal(err)
	}
	first := e.turn("the one we look for")
	if d := runTurn(context.Background(), r, first, agentclient.NewStreamState(), continuation.Hooks{}); d.Outcome != continuation.Completed {
		t.Fatalf("setup: %+v", d)
	}
	for i := 0; i < 4; i++ { // 4 more turns: 12 newer messages
		if d := runTurn(context.Background(), r, e.turn("later"), agentclient.NewStreamState(), continuation.Hooks{}); d.Outcome != continuation.Completed {
			t.Fatalf("setup: %+v", d)
		}
	}
	// A new attempt of the first turn that knows nothing but its otid.
	first.PriorIntent = true
	d := runTurn(context.Background(), r, first, agentclient.NewStreamState(), continuation.Hooks{})
	if d.Outcome != continuation.Completed || d.Evidence != continuation.EvidenceHistory || d.Sends != 0 {
		t.Fatalf("decision %+v", d)
	}
	if n := e.sim.CountOtid(first.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
	if d.SearchedMessages <= 2 {
		t.Errorf("found on the first page (%d messages read): the test does not exercise paging", d.SearchedMessages)
	}
}

// stepTurn runs a turn, waiting for its pending stream between the
// runner's calls as queue's handler does; waits counts the waits.
func (e *env) stepTurn(t *testing.T, tu continuation.Turn, st *agentclient.StreamState, h *continuation.Hooks) (d continuation.Result, waits int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), e.b.TaskTimeout())
	defer cancel()
	for e.runner.Run(ctx, &tu, st, h, &d) {
		if !st.Pending() {
			t.Fatal("Run returned pending, but the state holds no pending stream")
		}
		if d != (continuation.Result{}) {
			t.Fatalf("Run returned pending and wrote a decision: %+v", d)
		}
		waits++
		st.Wait()
	}
	if st.Pending() {
		t.Fatal("a decided turn left its stream pending")
	}
	return d, waits
}

// A turn whose stream returns early while the agent thinks is decided as
// one read through net/http (which waits under the call), with the same
// phases and events; and a stream lost while it waits is continued as one
// lost under the call.
func TestRunStepwise(t *testing.T) {
	e := newEnv(t, toolScriptTaking(100*time.Second)) // 100 ms at the test's scale, pings every 40 ms
	var runPhases, stepPhases []continuation.Activity
	var runEvents, stepEvents int
	nc, err := agentclient.New(agentclient.Config{BaseURL: e.sim.URL, RequestTimeout: time.Second, StreamTransport: agentclient.StreamNetHTTP})
	if err != nil {
		t.Fatal(err)
	}
	nr, err := continuation.New(continuation.Config{Client: nc, Budget: e.b})
	if err != nil {
		t.Fatal(err)
	}
	ref := e.turn("weather?")
	refSt := agentclient.NewStreamState()
	want := runTurn(context.Background(), nr, ref, refSt, continuation.Hooks{
		OnActivity: func(p continuation.Activity) { runPhases = append(runPhases, p) },
		OnEvent:    func(agentclient.Event) { runEvents++ }})

	tu := e.turn("weather?")
	st := agentclient.NewStreamState()
	d, waits := e.stepTurn(t, tu, st, &continuation.Hooks{
		OnActivity: func(p continuation.Activity) { stepPhases = append(stepPhases, p) },
		OnEvent:    func(agentclient.Event) { stepEvents++ }})
	if waits == 0 {
		t.Fatal("the stream never returned early while the agent thought")
	}
	if d.Outcome != continuation.Completed || d.Outcome != want.Outcome || d.StopReason != want.StopReason || d.Sends != 1 || d.Polls != 0 {
		t.Fatalf("stepwise decided %+v, net/http %+v", d, want)
	}
	if st.Answer() != refSt.Answer() || st.Answer() == "" {
		t.Errorf("answer %q, net/http's %q", st.Answer(), refSt.Answer())
	}
	if !slices.Equal(stepPhases, runPhases) {
		t.Errorf("phases %v, net/http's %v", stepPhases, runPhases)
	}
	if stepEvents == 0 || (stepEvents > runEvents+3 || stepEvents < runEvents-3) { // pings vary with timing
		t.Errorf("%d events, net/http's %d", stepEvents, runEvents)
	}
	if n := e.sim.CountOtid(tu.Otid); n != 1 {
		t.Fatalf("%d user messages with the otid, want 1", n)
	}
	var bad continuation.Result
	if e.runner.Run(context.Background(), &continuation.Turn{AgentID: e.agent}, agentclient.NewStreamState(), &continuation.Hooks{}, &bad) || bad.Outcome != continuation.Rejected {
		t.Fatalf("invalid turn: %+v", bad)
	}

	t.Run("stall while pending", func(t *testing.T) {
		e := newEnv(t, toolScript())
		e.sim.SetFault(e.agent, lettasim.Fault{StallAfter: 3, StallFor: lettasim.Forever})
		tu := e.turn("weather?")
		st := agentclient.NewStreamState()
		d, waits := e.stepTurn(t, tu, st, &continuation.Hooks{})
		if waits == 0 {
			t.Fatal("the stream never returned early")
		}
		if d.Outcome != continuation.Completed || d.Clock != agentclient.ClockStall || d.Sends != 1 || d.Polls == 0 || d.Resend == continuation.ResendSent {
			t.Fatalf("decision %+v, want the stalled run continued by polling, not sent again", d)
		}
		if n := e.sim.CountOtid(tu.Otid); n != 1 {
			t.Fatalf("%d user messages with the otid, want 1", n)
		}
	})
}
