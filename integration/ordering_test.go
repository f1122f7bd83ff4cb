package integration

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// checkSerialRuns fails unless the agent's runs never overlap in time and
// all ended.
func checkSerialRuns(t *testing.T, sim *lettasim.Server, agent string, want int) {
	t.Helper()
	runs := sim.Runs(agent)
	if len(runs) != want {
		t.Errorf("agent %s: %d runs, want %d", agent, len(runs), want)
	}
	slices.SortFunc(runs, func(a, b lettasim.RunInfo) int { return a.Started.Compare(b.Started) })
	for i, r := range runs {
		if r.Ended.IsZero() {
			t.Errorf("agent %s: run %d (%s) never ended", agent, i, r.ID)
			continue
		}
		if i > 0 && r.Started.Before(runs[i-1].Ended) {
			t.Errorf("agent %s: run %d started %v before run %d ended: two turns overlap",
				agent, i, runs[i-1].Ended.Sub(r.Started), i-1)
		}
	}
}

// checkOrder fails unless the agent received the texts containing marks,
// in this order, and nothing else.
func checkOrder(t *testing.T, sim *lettasim.Server, agent string, marks []string) {
	t.Helper()
	got := sim.UserMessages(agent)
	if len(got) != len(marks) {
		t.Errorf("agent %s received %d user messages, want %d", agent, len(got), len(marks))
	}
	for i := range min(len(got), len(marks)) {
		if !strings.HasSuffix(got[i].Text, " "+marks[i]) {
			var seen []string
			for _, r := range got {
				seen = append(seen, r.Text[strings.LastIndexByte(r.Text, ' ')+1:])
			}
			t.Fatalf("agent %s: user message %d is %q, want %s; order seen: %v", agent, i, got[i].Text, marks[i], seen)
		}
	}
}

// TestOrderingOneConversationTwoProcesses: 50 messages of one conversation
// enqueued at once, two worker processes, random agent delays: the agent
// sees them in enqueue order, one run at a time, and every answer names
// its message.
func TestOrderingOneConversationTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t)
	e.spawnWorker("A")
	e.spawnWorker("B")
	agent := e.sim.CreateAgent("ordered", nil)
	c := e.conv("ordered")
	const n = 50
	var res []queue.EnqueueResult
	var marks []string
	t0 := time.Now()
	for i := range n {
		think := simDur(time.Duration(rand.IntN(120)) * time.Millisecond)
		mark := fmt.Sprintf("m%02d", i)
		r := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: mark,
			Text: fmt.Sprintf("[[sim think=%s answer=a%02d]] %s", think, i, mark)})
		// Earlier turns may have finished meanwhile, and this one too: a
		// worker can take, run and finish it between the task's enqueue and
		// the client's join (-1: done).
		if r.Position < -1 || r.Position > i {
			t.Errorf("message %d: position %d at enqueue", i, r.Position)
		}
		res = append(res, r)
		marks = append(marks, mark)
	}
	enq := time.Since(t0)
	for i, r := range res {
		final, evs := e.waitFinal(c, r.TaskID, 60*time.Second)
		if final.Type != record.EventAnswer || final.Text != fmt.Sprintf("a%02d", i) || final.MessageID != marks[i] {
			t.Fatalf("message %d: final %s %q for message %q; %s", i, final.Type, final.Text, final.MessageID, summarize(evs))
		}
		if evs[0].Type == record.EventAccepted && r.Position >= 0 && evs[0].Position != r.Position {
			t.Errorf("message %d: accepted at position %d, enqueue said %d", i, evs[0].Position, r.Position)
		}
	}
	took := time.Since(t0)
	checkOrder(t, e.sim, agent, marks)
	checkSerialRuns(t, e.sim, agent, n)
	first, last := e.record(res[0].TaskID), e.record(res[n-1].TaskID)
	if last.QueueWait < took/2 {
		t.Errorf("last turn's queue wait %v does not include its wait for the conversation (all took %v)", last.QueueWait, took)
	}
	t.Logf("%d ordered turns in %v (enqueue %v); queue wait first %v, last %v", n, took.Round(time.Millisecond),
		enq.Round(time.Millisecond), first.QueueWait.Round(time.Millisecond), last.QueueWait.Round(time.Millisecond))
}

// TestOrderingManyConversations: 20 conversations × 10 messages across two
// workers: order holds per conversation, and conversations run in parallel.
func TestOrderingManyConversations(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t)
	e.spawnWorker("A")
	e.spawnWorker("B")
	const convs, per = 20, 10
	const think = 150 * time.Millisecond
	agents := make([]string, convs)
	cs := make([]record.Conversation, convs)
	marks := make([][]string, convs)
	var all []queue.EnqueueResult
	var allConv []int
	for k := range convs {
		agents[k] = e.sim.CreateAgent(fmt.Sprintf("many-%d", k), nil)
		cs[k] = e.conv(fmt.Sprintf("many-%d", k))
	}
	t0 := time.Now()
	for i := range per {
		for k := range convs {
			mark := fmt.Sprintf("c%02d-m%02d", k, i)
			r := e.enqueue(queue.Message{AgentID: agents[k], Conversation: cs[k], MessageID: mark,
				Text: fmt.Sprintf("[[sim think=%s]] %s", simDur(think), mark)})
			marks[k] = append(marks[k], mark)
			all = append(all, r)
			allConv = append(allConv, k)
		}
	}
	for i, r := range all {
		final, evs := e.waitFinal(cs[allConv[i]], r.TaskID, 90*time.Second)
		if final.Type != record.EventAnswer {
			t.Fatalf("turn %d: final %+v; %s", i, final, summarize(evs))
		}
	}
	took := time.Since(t0)
	var serial time.Duration
	for k := range convs {
		checkOrder(t, e.sim, agents[k], marks[k])
		checkSerialRuns(t, e.sim, agents[k], per)
		for _, r := range e.sim.Runs(agents[k]) {
			serial += r.Ended.Sub(r.Started)
		}
	}
	t.Logf("%d turns (%d conversations × %d) in %v; serial sum of the runs %v", convs*per, convs, per,
		took.Round(time.Millisecond), serial.Round(time.Millisecond))
	if took >= serial/2 {
		t.Errorf("took %v, not well under the serial sum %v: conversations did not run in parallel", took, serial)
	}
}

// coalesceCase: a long turn, then three messages while it runs.
func coalesceCase(t *testing.T, coalesce bool) {
	e := newEnv(t)
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		if coalesce {
			c.Ordering.Coalesce = []string{"test"}
		}
	})
	agent := e.sim.CreateAgent("coalesce", nil)
	c := e.conv("coalesce")
	long := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "first",
		Text: fmt.Sprintf("[[sim think=%s answer=one]] first", simDur(1500*time.Millisecond))})
	e.waitAttempt(long.TaskID, 1, "streaming")
	var rs []queue.EnqueueResult
	for i, txt := range []string{"second", "third", "fourth"} {
		m := queue.Message{AgentID: agent, Conversation: c, MessageID: txt, Text: txt, SenderID: "alice"}
		if i == 0 {
			m.Text = "[[sim answer=later]] second"
		}
		r := e.enqueue(m)
		if r.Position != i+1 {
			t.Errorf("%s: position %d, want %d", txt, r.Position, i+1)
		}
		rs = append(rs, r)
	}
	if f, evs := e.waitFinal(c, long.TaskID, 20*time.Second); f.Type != record.EventAnswer || f.Text != "one" {
		t.Fatalf("first: %+v; %s", f, summarize(evs))
	}
	finals := make([]record.ReplyEvent, len(rs))
	for i, r := range rs {
		finals[i], _ = e.waitFinal(c, r.TaskID, 20*time.Second)
	}
	got := e.sim.UserMessages(agent)
	if !coalesce {
		if len(got) != 4 {
			t.Fatalf("coalescing off: the agent received %d user messages, want 4", len(got))
		}
		for i, f := range finals {
			if f.Type != record.EventAnswer || f.AnsweredBy != "" || f.MessageID != []string{"second", "third", "fourth"}[i] {
				t.Errorf("coalescing off: final of %s: %+v", rs[i].TaskID, f)
			}
		}
		checkSerialRuns(t, e.sim, agent, 4)
		return
	}
	if len(got) != 2 {
		t.Fatalf("coalescing on: the agent received %d user messages, want 2: %+v", len(got), got)
	}
	want := "[[sim answer=later]] second\n\nthird\n\nfourth"
	if got[1].Text != want {
		t.Fatalf("merged message %q, want %q", got[1].Text, want)
	}
	head := rs[0].TaskID
	for i, f := range finals {
		if f.Type != record.EventAnswer || f.AnsweredBy != head || f.MessageID != []string{"second", "third", "fourth"}[i] {
			t.Errorf("final of %s: %+v (want answered_by %s)", rs[i].TaskID, f, head)
		}
	}
	if finals[0].Text != "later" || finals[1].Text != "" || finals[2].Text != "" {
		t.Errorf("texts: head %q, merged %q %q", finals[0].Text, finals[1].Text, finals[2].Text)
	}
	if rec := e.record(head); rec.Outcome != record.OutcomeAnswered || !slices.Equal(rec.Merged, []string{"third", "fourth"}) {
		t.Errorf("head journal: outcome %s merged %v", rec.Outcome, rec.Merged)
	}
	for _, r := range rs[1:] {
		rec := e.record(r.TaskID)
		if rec.Outcome != record.OutcomeCoalesced || rec.AnsweredBy != head {
			t.Errorf("journal of %s: outcome %s answered_by %s", r.TaskID, rec.Outcome, rec.AnsweredBy)
		}
	}
	checkSerialRuns(t, e.sim, agent, 2)
	e.settled()
	if n := countFinal(e.events(c, "")); n != 4 {
		t.Errorf("%d final events, want 4", n)
	}
}

func TestCoalescing(t *testing.T) {
	t.Run("on", func(t *testing.T) { t.Parallel(); coalesceCase(t, true) })
	t.Run("off", func(t *testing.T) { t.Parallel(); coalesceCase(t, false) })
}
