package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// oneRunPerAgent makes the simulator refuse a send with 409 "conversation busy" while the agent
// has a run in progress, as a Letta server does.
func oneRunPerAgent() envOpt {
	return withSim(func(c *lettasim.Config) { c.OneRunPerAgent = true })
}

// withScope sets the ordering scope of the test's client and workers.
func withScope(s ordering.Scope) envOpt { return func(e *env, _ *lettasim.Config) { e.scope = s } }

// An agent shared by several chats, on a Letta that runs one turn per agent at a time. With the
// conversation scope, lettaq starts the chats' turns together: the agent answers one and refuses
// the others with 409 busy; those are retried (after at least a second) and answered, each
// user message stored once. With the agent scope, lettaq runs them one after the other and
// Letta never says busy.
func TestBusyAgentSharedByChats(t *testing.T) {
	for _, tc := range []struct {
		name     string
		scope    ordering.Scope
		policy   budget.ResendPolicy
		wantBusy bool
	}{
		{"conversation", ordering.ScopeConversation, budget.ResendIfNotAdmitted, true},
		// A refused send stored nothing: the retry sends without a search,
		// even where resends are forbidden.
		{"conversation, resend never", ordering.ScopeConversation, budget.ResendNever, true},
		{"agent", ordering.ScopeAgent, budget.ResendIfNotAdmitted, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newEnv(t, oneRunPerAgent(), withScope(tc.scope), withBudget(func(b *budget.Config) { b.ResendPolicy = tc.policy }))
			e.startWorker("A")
			agent := e.sim.CreateAgent("shared", nil)
			const chats = 3
			var convs []record.Conversation
			var res []queue.EnqueueResult
			for i := range chats {
				c := e.conv(fmt.Sprintf("chat%d", i))
				convs = append(convs, c)
				res = append(res, e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m",
					Text: fmt.Sprintf("[[sim think=%s answer=a%d]] from chat %d", simDur(400*time.Millisecond), i, i)}))
			}
			for i, r := range res {
				final, evs := e.waitFinal(convs[i], r.TaskID, 30*time.Second)
				if final.Type != record.EventAnswer || final.Text != fmt.Sprintf("a%d", i) {
					t.Fatalf("chat %d: final %s %q; %s", i, final.Type, final.Text, summarize(evs))
				}
				if n := e.sim.CountOtid(r.Otid); n != 1 {
					t.Errorf("chat %d: %d user messages stored for its otid, want 1", i, n)
				}
			}
			e.settled()
			checkSerialRuns(t, e.sim, agent, chats)
			busy := e.sim.Requests().Get(lettasim.EndpointStream).Errors
			retried := 0
			for _, r := range res {
				rec := e.record(r.TaskID)
				if len(rec.Attempts) > 1 {
					retried++
				}
				for _, a := range rec.Attempts[1:] {
					if a.ResendDecision == record.ResendSent || a.ResendDecision == record.ResendForbidden {
						t.Errorf("task %s attempt %d: resend decision %q after a busy refusal; a refused send stored nothing, the retry just sends",
							r.TaskID, a.N, a.ResendDecision)
					}
				}
			}
			if tc.wantBusy && (busy == 0 || retried == 0) {
				t.Errorf("conversation scope: %d busy answers, %d retried turns; want the overlap refused and retried", busy, retried)
			}
			if !tc.wantBusy && (busy != 0 || retried != 0) {
				t.Errorf("agent scope: %d busy answers, %d retried turns; want none", busy, retried)
			}
			t.Logf("scope %s: %d busy answers, %d of %d turns retried", tc.name, busy, retried, chats)
		})
	}
}
