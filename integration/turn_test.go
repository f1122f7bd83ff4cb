package integration

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

func TestHappyPath(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("happy", &lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Let me look."},
		{Kind: lettasim.ToolCall, ToolName: "search"},
		{Kind: lettasim.ToolReturn, Text: "42", Delay: simDur(50 * time.Millisecond)},
		{Kind: lettasim.Assistant, Text: "The answer is 42.\nAnything else?"},
	}})
	e.startWorker("w1")
	c := e.conv("happy")
	t0 := time.Now()
	res := e.enqueue(queue.Message{AgentID: agent, Text: "what is the answer?", Conversation: c, MessageID: "m1", SenderID: "u1"})
	if res.Duplicate || res.TaskID != "turn:test:"+c.ChatID+":m1" {
		t.Fatalf("enqueue result %+v", res)
	}
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	total := time.Since(t0)
	if final.Type != record.EventAnswer || final.Text != "The answer is 42.\nAnything else?" {
		t.Fatalf("final %+v; events %s", final, summarize(evs))
	}
	var firstDelta time.Duration
	var sawAccepted, sawTool, sawReturn, sawPhase bool
	for _, ev := range evs {
		if ev.Otid != res.Otid || ev.MessageID != "m1" {
			t.Errorf("event %s carries otid %q message %q", ev.Type, ev.Otid, ev.MessageID)
		}
		switch ev.Type {
		case record.EventAccepted:
			sawAccepted = true
		case record.EventPhase:
			sawPhase = true
		case record.EventTool:
			if ev.Tool.Name == "search" && ev.Tool.Status == record.ToolStatusCall {
				sawTool = true
			}
			if ev.Tool.Status == record.ToolStatusSuccess && ev.Tool.Return == "42" {
				sawReturn = true
			}
		case record.EventAnswerDelta:
			if !ev.Narration && firstDelta == 0 {
				firstDelta = ev.Time.Sub(t0)
			}
		}
	}
	if !sawAccepted || !sawTool || !sawReturn || !sawPhase || firstDelta == 0 {
		t.Fatalf("accepted=%v tool=%v return=%v phase=%v delta=%v; events %s", sawAccepted, sawTool, sawReturn, sawPhase, firstDelta, summarize(evs))
	}
	if final.RunID == "" {
		t.Errorf("answer has no run id")
	}
	t.Logf("enqueue → first answer_delta %v, → answer %v; events: %s", firstDelta, total, summarize(evs))

	// The result is readable from Asynq.
	var info *asynq.TaskInfo
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		info, err = e.insp.GetTaskInfo(e.queue, res.TaskID)
		if err == nil && info.State == asynq.TaskStateCompleted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("task info: %+v %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	var tr queue.TurnResult
	if err := json.Unmarshal(info.Result, &tr); err != nil {
		t.Fatalf("result %q: %v", info.Result, err)
	}
	if tr.Answer != final.Text || tr.Otid != res.Otid || tr.RunID == "" || tr.Outcome != record.OutcomeAnswered || tr.Usage == nil {
		t.Fatalf("result %+v", tr)
	}
	rec := e.record(res.TaskID)
	if rec.Outcome != record.OutcomeAnswered || len(rec.Attempts) != 1 || rec.TTFT <= 0 || len(rec.Tools) != 1 ||
		rec.Tools[0].Name != "search" || rec.Tools[0].Duration <= 0 || rec.QueueWait <= 0 {
		t.Fatalf("journal %+v; %s", rec, describeAttempts(rec))
	}
	t.Logf("journal: queue wait %v, ttft %v, latency %v, tool %s %v", rec.QueueWait, rec.TTFT, rec.Latency, rec.Tools[0].Name, rec.Tools[0].Duration)
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
}

func TestDuplicateMessageIDOneTurn(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("dup", nil)
	c := e.conv("dup")
	m := queue.Message{AgentID: agent, Text: "hello twice", Conversation: c, MessageID: "same-id"}
	r1 := e.enqueue(m)
	r2 := e.enqueue(m)
	if r1.Duplicate || !r2.Duplicate || r1.TaskID != r2.TaskID || r1.Otid != r2.Otid {
		t.Fatalf("enqueue results %+v %+v", r1, r2)
	}
	e.startWorker("w1")
	e.waitFinal(c, r1.TaskID, 20*time.Second)
	// A third delivery after the turn finished is still the same task.
	if r3 := e.enqueue(m); !r3.Duplicate {
		t.Fatalf("late duplicate %+v", r3)
	}
	e.settled()
	evs := e.events(c, "")
	if n := countFinal(evs); n != 1 {
		t.Fatalf("%d final events: %s", n, summarize(evs))
	}
	if n := e.sim.CountOtid(r1.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
	if n := len(e.sim.UserMessages(agent)); n != 1 {
		t.Fatalf("agent got %d messages", n)
	}
	accepted := 0
	for _, ev := range evs {
		if ev.Type == record.EventAccepted {
			accepted++
		}
	}
	if accepted != 1 {
		t.Fatalf("%d accepted events", accepted)
	}
}

// faultCase is one simulator fault driven through the whole worker.
type faultCase struct {
	name   string
	script *lettasim.Script
	fault  *lettasim.Fault
	list   *lettasim.ListFault
	// want
	final      record.EventType // answer, approval_required or error
	stored     int              // user messages with the otid at the simulator
	clock      string           // the first attempt's timeout clock, if any
	resend     string           // a resend decision some attempt made, if any
	outcome    string
	stopReason string
}

func runFaultCases(t *testing.T, e *env, cases []faultCase) {
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			agent := e.sim.CreateAgent(tc.name, tc.script)
			if tc.fault != nil {
				e.sim.SetFault(agent, *tc.fault)
			}
			if tc.list != nil {
				e.sim.SetListFault(agent, *tc.list)
			}
			c := e.conv(tc.name)
			t0 := time.Now()
			res := e.enqueue(queue.Message{AgentID: agent, Text: "fault " + tc.name, Conversation: c, MessageID: "m-" + tc.name})
			final, evs := e.waitFinal(c, res.TaskID, 60*time.Second)
			took := time.Since(t0)
			rec := e.record(res.TaskID)
			// Late events would show here, once no attempt is left.
			e.settled()
			all := e.events(c, res.TaskID)
			if n := countFinal(all); n != 1 {
				t.Errorf("%d final events: %s", n, summarize(all))
			}
			if final.Type != tc.final {
				t.Errorf("final %s %q, want %s; events %s", final.Type, final.Text, tc.final, summarize(evs))
			}
			if n := e.sim.CountOtid(res.Otid); n != tc.stored {
				t.Errorf("otid stored %d times, want %d", n, tc.stored)
			}
			if rec.Outcome != tc.outcome {
				t.Errorf("journal outcome %q, want %q (%s)", rec.Outcome, tc.outcome, rec.Error)
			}
			if tc.stopReason != "" && rec.StopReason != tc.stopReason {
				t.Errorf("journal stop reason %q, want %q", rec.StopReason, tc.stopReason)
			}
			if tc.clock != "" && rec.Attempts[0].TimeoutClock != tc.clock {
				t.Errorf("first attempt clock %q, want %q", rec.Attempts[0].TimeoutClock, tc.clock)
			}
			if tc.resend != "" {
				found := false
				for _, a := range rec.Attempts {
					found = found || a.ResendDecision == tc.resend
				}
				if !found {
					t.Errorf("no attempt with resend decision %q", tc.resend)
				}
			}
			t.Logf("%s in %v: %s", final.Type, took.Round(time.Millisecond), describeAttempts(rec))
		})
	}
}

// countingObserver counts what the workers report.
type countingObserver struct {
	queue.NopObserver
	mu       sync.Mutex
	counts   map[string]int
	outcomes map[string]int
}

func newCountingObserver() *countingObserver {
	return &countingObserver{counts: map[string]int{}, outcomes: map[string]int{}}
}

func (o *countingObserver) add(k string) { o.mu.Lock(); o.counts[k]++; o.mu.Unlock() }
func (o *countingObserver) get(k string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.counts[k]
}
func (o *countingObserver) TaskStarted(string, int, time.Duration) { o.add("started") }
func (o *countingObserver) StreamTimeout(clock string)             { o.add("timeout:" + clock) }
func (o *countingObserver) Continuation(polls, resumes int)        { o.add("continuation") }
func (o *countingObserver) Resend(d string)                        { o.add("resend:" + d) }
func (o *countingObserver) TurnFinished(_, outcome string, _, _ time.Duration) {
	o.add("finished")
	o.mu.Lock()
	o.outcomes[outcome]++
	o.mu.Unlock()
}

func TestFaultsThroughWorker(t *testing.T) {
	e := newEnv(t)
	obs := newCountingObserver()
	withObs := func(c *queue.WorkerConfig) { c.Observer = obs }
	e.startWorker("w1", withObs)
	e.startWorker("w2", withObs)
	cases := faultMatrix()
	t.Run("cases", func(t *testing.T) { runFaultCases(t, e, cases) })
	if got := obs.get("finished"); got != len(cases) {
		t.Errorf("observer: %d turns finished, want %d", got, len(cases))
	}
	for _, k := range []string{"timeout:stall", "timeout:connect", "resend:resent", "continuation"} {
		if obs.get(k) == 0 {
			t.Errorf("observer never saw %s: %v", k, obs.counts)
		}
	}
	t.Logf("observer: %v outcomes %v", obs.counts, obs.outcomes)
}

// faultMatrix is the fault matrix every thread mode runs: each case on an
// agent of its own.
func faultMatrix() []faultCase {
	long := &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Thinking hard."},
		{Kind: lettasim.Reasoning, Text: "Still thinking.", Delay: simDur(400 * time.Millisecond)},
		{Kind: lettasim.Assistant, Text: "done thinking"},
	}}
	tools := lettasim.ToolScript(simDur(300*time.Millisecond), "tool answer", "lookup")
	approval := &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "I need permission."},
		{Kind: lettasim.ApprovalRequest, ToolName: "delete_files", Arguments: `{"path":"/"}`},
	}}
	return []faultCase{
		{name: "stall-run-continues", script: long, fault: &lettasim.Fault{StallAfter: 2, StallFor: lettasim.Forever},
			final: record.EventAnswer, stored: 1, clock: "stall", outcome: record.OutcomeAnswered},
		{name: "disconnect-mid-tool-call", script: &tools, fault: &lettasim.Fault{DisconnectAfter: 4},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
		{name: "5xx-after-store", fault: &lettasim.Fault{Status5xxAfterStore: 500},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
		{name: "drop-before-response", fault: &lettasim.Fault{DropBeforeResponse: true},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
		{name: "5xx-before-store-resend", fault: &lettasim.Fault{Status5xxBeforeStore: 503},
			final: record.EventAnswer, stored: 1, resend: record.ResendSent, outcome: record.OutcomeAnswered},
		// Letta's API rate limit stored nothing: no search, no resend decision;
		// the next attempt sends (it used to look, then resend).
		{name: "429", fault: &lettasim.Fault{Status429: true, RetryAfter: simDur(100 * time.Millisecond)},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
		{name: "first-byte-delay", fault: &lettasim.Fault{FirstByteDelay: simDur(1500 * time.Millisecond)},
			final: record.EventAnswer, stored: 1, clock: "connect", outcome: record.OutcomeAnswered},
		{name: "llm-api-error", fault: &lettasim.Fault{EndWith: "llm_api_error", EndAfter: 1},
			final: record.EventError, stored: 1, outcome: record.OutcomeFailed, stopReason: "llm_api_error"},
		{name: "cancelled", script: &tools, fault: &lettasim.Fault{EndWith: "cancelled", EndAfter: 2},
			final: record.EventError, stored: 1, outcome: record.OutcomeFailed, stopReason: "cancelled"},
		{name: "unhandled-exception", fault: &lettasim.Fault{UnhandledException: true, EndAfter: 1},
			final: record.EventError, stored: 1, outcome: record.OutcomeFailed},
		{name: "requires-approval", script: approval,
			final: record.EventApprovalRequired, stored: 1, outcome: record.OutcomeApprovalRequired, stopReason: "requires_approval"},
		{name: "resume-refused", script: long, fault: &lettasim.Fault{StallAfter: 2, StallFor: lettasim.Forever, ResumeStatus: 410},
			final: record.EventAnswer, stored: 1, clock: "stall", outcome: record.OutcomeAnswered},
		{name: "slow-failing-lists", fault: &lettasim.Fault{Status5xxAfterStore: 502},
			list:  &lettasim.ListFault{Delay: simDur(100 * time.Millisecond), Fail: 3},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
		{name: "run-outlives-attempt", script: &lettasim.Script{Steps: []lettasim.Step{
			{Kind: lettasim.Reasoning, Text: "This takes long."},
			{Kind: lettasim.Assistant, Text: "finally", Delay: simDur(7 * time.Second)},
		}}, fault: &lettasim.Fault{StallAfter: 1, StallFor: lettasim.Forever},
			final: record.EventAnswer, stored: 1, clock: "stall", outcome: record.OutcomeAnswered},
	}
}

func TestFaultsResendForbidden(t *testing.T) {
	e := newEnv(t, withBudget(func(b *budget.Config) { b.ResendPolicy = budget.ResendNever }))
	e.startWorker("w1")
	runFaultCases(t, e, []faultCase{
		{name: "5xx-before-store-no-resend", fault: &lettasim.Fault{Status5xxBeforeStore: 503},
			final: record.EventError, stored: 0, resend: record.ResendForbidden, outcome: record.OutcomeFailed},
		{name: "5xx-after-store-no-resend-needed", fault: &lettasim.Fault{Status5xxAfterStore: 503},
			final: record.EventAnswer, stored: 1, outcome: record.OutcomeAnswered},
	})
}

func TestBadPayloadsArchived(t *testing.T) {
	e := newEnv(t)
	known := e.sim.CreateAgent("known", nil)
	e.startWorker("w1")
	raw := asynq.NewClient(e.redisOpt())
	defer raw.Close()
	conv := e.conv("bad")
	convJSON, _ := json.Marshal(conv)
	cases := []struct {
		name    string
		payload string
		wantErr string
		event   bool // conversation readable: an error event is expected
	}{
		{"invalid-json", `{"v":1, "agent_id": `, "not a JSON object", false},
		{"unknown-version", `{"v":7,"agent_id":"` + known + `","text":"x","conversation":` + string(convJSON) + `}`, "unknown payload version", true},
		{"missing-agent", `{"v":1,"text":"hi","conversation":` + string(convJSON) + `}`, "agent_id", true},
		{"oversized-text", `{"v":1,"agent_id":"` + known + `","text":"` + strings.Repeat("x", queue.MaxTextBytes+1) + `","conversation":` + string(convJSON) + `}`, "more than the limit", true},
		{"unknown-agent", `{"v":1,"agent_id":"agent-00000000-0000-4000-8000-000000000000","text":"hi","conversation":` + string(convJSON) + `}`, "404", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id := "bad:" + tc.name + ":" + randHex(4)
			if _, err := raw.Enqueue(asynq.NewTask(queue.TaskType, []byte(tc.payload)), asynq.TaskID(id), asynq.Queue(e.queue),
				asynq.MaxRetry(5), asynq.Timeout(e.budget.TaskTimeout())); err != nil {
				t.Fatal(err)
			}
			var info *asynq.TaskInfo
			deadline := time.Now().Add(15 * time.Second)
			for {
				var err error
				info, err = e.insp.GetTaskInfo(e.queue, id)
				if err == nil && info.State == asynq.TaskStateArchived {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("not archived: %+v %v", info, err)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if info.Retried != 0 || !strings.Contains(info.LastErr, tc.wantErr) {
				t.Fatalf("retried %d, last error %q (want %q)", info.Retried, info.LastErr, tc.wantErr)
			}
			evs := e.events(conv, id)
			if tc.event && (countFinal(evs) != 1 || evs[len(evs)-1].Type != record.EventError) {
				t.Fatalf("events %s", summarize(evs))
			}
			t.Logf("archived: %s", info.LastErr)
		})
	}
	if n := len(e.sim.UserMessages(known)); n != 0 {
		t.Fatalf("agent got %d messages", n)
	}
	for _, r := range e.sim.Runs(known) {
		t.Fatalf("unexpected run %+v", r)
	}
}

func TestEnqueueValidation(t *testing.T) {
	e := newEnv(t)
	c := e.conv("v")
	good := queue.Message{AgentID: "a", Text: "t", Conversation: c}
	for _, tc := range []struct {
		field string
		mod   func(*queue.Message)
	}{
		{"agent_id", func(m *queue.Message) { m.AgentID = "" }},
		{"text", func(m *queue.Message) { m.Text = "" }},
		{"text", func(m *queue.Message) { m.Text = strings.Repeat("é", queue.MaxTextBytes) }},
		{"text", func(m *queue.Message) { m.Text = "\xff" }},
		{"conversation.integration", func(m *queue.Message) { m.Conversation.Integration = "a:b" }},
		{"conversation.chat_id", func(m *queue.Message) { m.Conversation.ChatID = "" }},
		{"otid", func(m *queue.Message) { m.Otid = "not-a-uuid" }},
		{"metadata", func(m *queue.Message) { m.Metadata = map[string]string{"": "x"} }},
	} {
		m := good
		tc.mod(&m)
		_, err := e.client.Enqueue(context.Background(), m)
		ve, ok := queue.IsValidationError(err)
		if !ok || ve.Field != tc.field {
			t.Errorf("%s: got %v", tc.field, err)
		}
	}
}
