package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// chatLoad enqueues msgs messages in each of chats chats of one agent, all
// at once, and waits for every answer (each naming its message). It
// returns the chats and, per chat, the enqueue results in order.
func chatLoad(t *testing.T, e *env, agent string, chats, msgs int) ([]record.Conversation, [][]queue.EnqueueResult) {
	t.Helper()
	convs := make([]record.Conversation, chats)
	res := make([][]queue.EnqueueResult, chats)
	for i := range convs {
		convs[i] = e.conv(fmt.Sprintf("chat%02d", i))
	}
	for j := range msgs {
		for i, c := range convs {
			think := simDur(time.Duration(50+rand.IntN(150)) * time.Millisecond)
			res[i] = append(res[i], e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: fmt.Sprintf("m%d", j),
				Text: fmt.Sprintf("[[sim think=%s answer=c%02dm%d]] c%02dm%d", think, i, j, i, j)}))
		}
	}
	for i, c := range convs {
		for j, r := range res[i] {
			final, evs := e.waitFinal(c, r.TaskID, 120*time.Second)
			if final.Type != record.EventAnswer || final.Text != fmt.Sprintf("c%02dm%d", i, j) {
				t.Fatalf("chat %d message %d: final %s %q; %s", i, j, final.Type, final.Text, summarize(evs))
			}
		}
	}
	e.settled()
	return convs, res
}

// checkThreadOrder fails unless the thread's user messages are, in order,
// exactly those of res (one per otid).
func checkThreadOrder(t *testing.T, got []lettasim.Received, res []queue.EnqueueResult, what string) {
	t.Helper()
	if len(got) != len(res) {
		t.Fatalf("%s: %d user messages, want %d", what, len(got), len(res))
	}
	for j, r := range res {
		if got[j].Otid != r.Otid {
			var seen []string
			for _, m := range got {
				seen = append(seen, m.Text[strings.LastIndexByte(m.Text, ' ')+1:])
			}
			t.Fatalf("%s: user message %d has otid %s, want %s (order seen %v)", what, j, got[j].Otid, r.Otid, seen)
		}
	}
}

// maxOverlap is the largest number of runs in progress at one instant.
func maxOverlap(runs []lettasim.RunInfo) int {
	type edge struct {
		at time.Time
		d  int
	}
	var es []edge
	for _, r := range runs {
		es = append(es, edge{r.Started, +1}, edge{r.Ended, -1})
	}
	slices.SortFunc(es, func(a, b edge) int {
		if c := a.at.Compare(b.at); c != 0 {
			return c
		}
		return a.d - b.d // an end before a start at the same instant
	})
	n, best := 0, 0
	for _, x := range es {
		n += x.d
		best = max(best, n)
	}
	return best
}

// 20 chats of ONE agent, 5 messages each, enqueued at once, two worker
// processes, conversation mode: each chat's messages land in a Letta
// conversation of its own, in enqueue order, one user message per otid;
// turns of different chats run at the same time (from the simulator's run
// records); and no 409 at all (each chat's turns are ordered by lettaq, and
// chats do not share a thread).
func TestConversationModeManyChatsOneAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	mode := envThreadMode + "=conversation"
	e.spawnWorker("A", mode)
	e.spawnWorker("B", mode)
	agent := e.sim.CreateAgent("shared", nil)
	t0 := time.Now()
	convs, res := chatLoad(t, e, agent, 20, 5)
	took := time.Since(t0)
	seen := map[string]bool{}
	for i, c := range convs {
		id, err := e.rdb.Get(context.Background(), thread.Key(e.prefix, agent, c.Integration, c.ChatID)).Result()
		if err != nil {
			t.Fatalf("chat %d: no thread in Redis: %v", i, err)
		}
		if seen[id] {
			t.Fatalf("chat %d shares conversation %s", i, id)
		}
		seen[id] = true
		checkThreadOrder(t, e.sim.ConversationUserMessages(id), res[i], fmt.Sprintf("chat %d (%s)", i, id))
		for _, r := range res[i] {
			if n := e.sim.CountOtid(r.Otid); n != 1 {
				t.Fatalf("chat %d: otid %s stored %d times", i, r.Otid, n)
			}
			if rec := e.record(r.TaskID); rec.LettaConversationID != id {
				t.Fatalf("chat %d: journal says thread %q, Redis %s", i, rec.LettaConversationID, id)
			}
		}
	}
	if n := len(e.sim.Conversations(agent)); n != len(convs) {
		t.Errorf("%d Letta conversations for %d chats", n, len(convs))
	}
	runs := e.sim.Runs(agent)
	overlap := maxOverlap(runs)
	if overlap < 2 {
		t.Errorf("at most %d run at a time: the chats did not run in parallel", overlap)
	}
	conflicts := e.sim.Conflicts()
	if conflicts != 0 {
		t.Errorf("%d 409 busy answers, want none", conflicts)
	}
	t.Logf("conversation mode: %d turns of 20 chats on one agent in %v, up to %d runs at once, %d runs, %d 409s",
		100, took.Round(time.Millisecond), overlap, len(runs), conflicts)
}

// The same load in default mode (every chat on the agent's default thread,
// ordering per agent): one run at a time, each chat in order, all
// answered, no 409.
func TestDefaultModeManyChatsOneAgent(t *testing.T) {
	if testing.Short() {
		t.Skip("process test")
	}
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadDefault), withScope(ordering.ScopeAgent))
	env := []string{envThreadMode + "=default", envOrdering + "=agent"}
	e.spawnWorker("A", env...)
	e.spawnWorker("B", env...)
	agent := e.sim.CreateAgent("shared-default", nil)
	t0 := time.Now()
	convs, res := chatLoad(t, e, agent, 20, 5)
	took := time.Since(t0)
	all := e.sim.ConversationUserMessages(agent) // the default thread
	if len(all) != 100 {
		t.Fatalf("default thread holds %d user messages, want 100", len(all))
	}
	for i := range convs {
		var mine []lettasim.Received
		for _, m := range all {
			if strings.HasSuffix(m.Text, fmt.Sprintf(" c%02dm", i)+m.Text[len(m.Text)-1:]) {
				mine = append(mine, m)
			}
		}
		checkThreadOrder(t, mine, res[i], fmt.Sprintf("chat %d", i))
		for _, r := range res[i] {
			if rec := e.record(r.TaskID); rec.ThreadMode != "default" || rec.LettaConversationID != "default" {
				t.Fatalf("chat %d: journal thread %q %q", i, rec.ThreadMode, rec.LettaConversationID)
			}
		}
	}
	checkSerialRuns(t, e.sim, agent, 100)
	if n := len(e.sim.Conversations(agent)); n != 0 {
		t.Errorf("%d conversations created in default mode", n)
	}
	conflicts := e.sim.Conflicts()
	if conflicts != 0 {
		t.Errorf("%d 409 busy answers, want none", conflicts)
	}
	t.Logf("default mode: 100 turns of 20 chats one at a time in %v, %d 409s", took.Round(time.Millisecond), conflicts)
}

// SIGKILL mid-stream in conversation mode, with the run id not journaled
// (the worker died before it could write it): the surviving worker finds
// the run by the turn's otid on the conversation's stream endpoint — no
// history search, no second send — and answers; one user message.
func TestConversationKilledMidStreamResumesByOtid(t *testing.T) {
	if testing.Short() {
		t.Skip("process test: waits for Asynq's lease recovery (~1-2 min)")
	}
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	mode := envThreadMode + "=conversation"
	a := e.spawnWorker("A", mode)
	agent := e.sim.CreateAgent("kill-conv", nil)
	c := e.conv("kill-conv")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "k",
		Text: fmt.Sprintf("[[sim think=%s answer=resumed-by-otid]] one", simDur(6*time.Second))})
	e.waitAttempt(res.TaskID, 1, "streaming")
	t0 := time.Now()
	a.signal(syscall.SIGKILL)
	a.wait(t, 10*time.Second)
	// Forget the run id, as if A died before journaling it.
	ctx := context.Background()
	rec, err := e.journal.Get(ctx, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	rec.RunID = ""
	if err := e.journal.Save(ctx, rec); err != nil {
		t.Fatal(err)
	}
	before := e.sim.Requests()
	e.spawnWorker("C", mode) // Asynq's first recovery check after its start is at ~+62s
	final, evs := e.waitFinal(c, res.TaskID, 150*time.Second)
	if final.Type != record.EventAnswer || final.Text != "resumed-by-otid" {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec = e.record(res.TaskID)
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("otid stored %d times", n)
	}
	after := e.sim.Requests()
	last := rec.Attempts[len(rec.Attempts)-1]
	if len(rec.Attempts) < 2 || last.Worker != "C" || last.Resumes == 0 || last.SentOtid || rec.RunID == "" {
		t.Fatalf("journal: %s", describeAttempts(rec))
	}
	searched := after.Get(lettasim.EndpointConvMessages).Requests - before.Get(lettasim.EndpointConvMessages).Requests
	sends := after.Get(lettasim.EndpointConvSend).Requests - before.Get(lettasim.EndpointConvSend).Requests
	if searched != 0 || sends != 0 {
		t.Fatalf("after the kill: %d history searches and %d sends; the otid alone should have found the run", searched, sends)
	}
	t.Logf("answered %v after SIGKILL: %s", time.Since(t0).Round(time.Millisecond), describeAttempts(rec))
}
