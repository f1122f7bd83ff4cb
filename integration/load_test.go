package integration

import (
	"context"
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestTwoWorkers200MixedTurns: two worker processes share one Redis; 200
// turns with a mix of faults (chosen per message with lettasim directives);
// halfway, one worker is stopped with SIGTERM and a new one started. Every
// turn must end with exactly one final event of the expected kind, and
// every otid must reach the agent exactly once.
func TestTwoWorkers200MixedTurns(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t)
	a := e.spawnWorker("A")
	e.spawnWorker("B")

	type mix struct {
		directive string
		want      record.EventType
	}
	mixes := []mix{
		{"", record.EventAnswer},
		{"stall=forever stall_after=2", record.EventAnswer},
		{"disconnect_after=3", record.EventAnswer},
		{"status_after_store=500", record.EventAnswer},
		{"status=503", record.EventAnswer},
		{fmt.Sprintf("status=429 retry_after=%s", simDur(100*time.Millisecond)), record.EventAnswer},
		{fmt.Sprintf("first_byte=%s", simDur(1500*time.Millisecond)), record.EventAnswer},
		{"drop=true", record.EventAnswer},
		{"end=llm_api_error end_after=1", record.EventError},
		{fmt.Sprintf("tools=lookup tool_delay=%s disconnect_after=4", simDur(100*time.Millisecond)), record.EventAnswer},
		{fmt.Sprintf("think=%s", simDur(700*time.Millisecond)), record.EventAnswer},
		{"approval=rm", record.EventApprovalRequired},
	}
	const agents, turns = 20, 200
	var agentIDs []string
	var convs []record.Conversation
	for i := range agents {
		agentIDs = append(agentIDs, e.sim.CreateAgent(fmt.Sprintf("load-%d", i), nil))
		convs = append(convs, e.conv(fmt.Sprintf("load-%d", i)))
	}
	// A turn that ends asking approval leaves its thread waiting (a later message gets 409
	// until the approval is answered, as at Letta), and this test answers none: each such turn
	// gets an agent and a conversation of its own.
	own := map[int]int{} // turn -> index in agentIDs and convs
	for i := range turns {
		if mixes[i%len(mixes)].want == record.EventApprovalRequired {
			own[i] = len(agentIDs)
			agentIDs = append(agentIDs, e.sim.CreateAgent(fmt.Sprintf("load-approval-%d", i), nil))
			convs = append(convs, e.conv(fmt.Sprintf("load-approval-%d", i)))
		}
	}
	type sent struct {
		res  queue.EnqueueResult
		want record.EventType
		conv int
	}
	all := make([]sent, turns)
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range turns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := mixes[i%len(mixes)]
			text := fmt.Sprintf("turn %d", i)
			if m.directive != "" {
				text = "[[sim " + m.directive + "]] " + text
			}
			k := i % agents
			if j, ok := own[i]; ok {
				k = j
			}
			res, err := e.client.Enqueue(context.Background(), queue.Message{AgentID: agentIDs[k], Text: text,
				Conversation: convs[k], MessageID: fmt.Sprintf("load-%d", i)})
			if err != nil {
				t.Errorf("enqueue %d: %v", i, err)
			}
			all[i] = sent{res: res, want: m.want, conv: k}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	finals := func() map[string][]record.ReplyEvent {
		out := make(map[string][]record.ReplyEvent)
		for _, c := range convs {
			for _, ev := range e.events(c, "") {
				if ev.Type == record.EventAnswer || ev.Type == record.EventApprovalRequired || (ev.Type == record.EventError && ev.Permanent) {
					out[ev.TaskID] = append(out[ev.TaskID], ev)
				}
			}
		}
		return out
	}
	restarted := false
	deadline := time.Now().Add(150 * time.Second)
	var got map[string][]record.ReplyEvent
	for {
		got = finals()
		if len(got) >= turns {
			break
		}
		if !restarted && len(got) >= turns/3 {
			restarted = true
			t.Logf("%d turns finished after %v: SIGTERM worker A, start A2", len(got), time.Since(t0).Round(time.Millisecond))
			a.signal(syscall.SIGTERM)
			e.spawnWorker("A2")
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d turns finished", len(got), turns)
		}
		time.Sleep(200 * time.Millisecond)
	}
	took := time.Since(t0)
	e.settled() // no attempt left that could write a late duplicate
	got = finals()
	kinds := map[record.EventType]int{}
	retried := 0
	for i, s := range all {
		evs := got[s.res.TaskID]
		if len(evs) != 1 {
			t.Errorf("turn %d (%s): %d final events", i, mixes[i%len(mixes)].directive, len(evs))
			continue
		}
		if evs[0].Type != s.want {
			t.Errorf("turn %d (%s): final %s %q, want %s", i, mixes[i%len(mixes)].directive, evs[0].Type, evs[0].Text, s.want)
		}
		kinds[evs[0].Type]++
		if n := e.sim.CountOtid(s.res.Otid); n != 1 {
			t.Errorf("turn %d (%s): otid stored %d times", i, mixes[i%len(mixes)].directive, n)
		}
		rec, err := e.journal.Get(context.Background(), s.res.TaskID)
		if err != nil {
			t.Errorf("turn %d: journal: %v", i, err)
			continue
		}
		if len(rec.Attempts) > 1 {
			retried++
		}
	}
	stored := 0
	for _, id := range agentIDs {
		stored += len(e.sim.UserMessages(id))
	}
	if stored != turns {
		t.Errorf("the agents received %d user messages for %d turns", stored, turns)
	}
	t.Logf("%d turns in %v (%.0f turns/s): %v; %d needed more than one attempt", turns, took.Round(time.Millisecond),
		float64(turns)/took.Seconds(), kinds, retried)
}
