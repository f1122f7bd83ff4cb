package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/thread"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Two chats of one agent in conversation mode: each gets a Letta
// conversation of its own, tagged with its summary and kept in Redis; a
// second message of a chat goes to the same conversation; the journal says
// which thread each turn used.
func TestConversationModeOneThreadPerChat(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	agent := e.sim.CreateAgent("conv", nil)
	chats := []record.Conversation{e.conv("a"), e.conv("b")}
	threads := map[string]string{}
	for round := range 2 {
		for i, c := range chats {
			res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: fmt.Sprintf("m%d", round),
				Text: fmt.Sprintf("[[sim answer=r%dc%d]] hi", round, i)})
			final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
			if final.Type != record.EventAnswer || final.Text != fmt.Sprintf("r%dc%d", round, i) {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			rec := e.record(res.TaskID)
			if rec.ThreadMode != string(queue.ThreadConversation) || !agentclient.ValidConversationID(rec.LettaConversationID) ||
				rec.LettaConversationID == agentclient.DefaultConversation {
				t.Fatalf("journal thread %q %q", rec.ThreadMode, rec.LettaConversationID)
			}
			if prev, ok := threads[c.ChatID]; ok && prev != rec.LettaConversationID {
				t.Fatalf("chat %s moved from %s to %s", c.ChatID, prev, rec.LettaConversationID)
			}
			threads[c.ChatID] = rec.LettaConversationID
			got := e.sim.ConversationUserMessages(rec.LettaConversationID)
			if len(got) != round+1 || got[round].Otid != res.Otid {
				t.Fatalf("conversation %s holds %+v", rec.LettaConversationID, got)
			}
			stored, err := e.rdb.Get(context.Background(), thread.Key(e.prefix, agent, c.Integration, c.ChatID)).Result()
			if err != nil || stored != rec.LettaConversationID {
				t.Fatalf("Redis keeps %q (%v), want %s", stored, err, rec.LettaConversationID)
			}
		}
	}
	if threads[chats[0].ChatID] == threads[chats[1].ChatID] {
		t.Fatal("two chats share a conversation")
	}
	convs := e.sim.Conversations(agent)
	if len(convs) != 2 {
		t.Fatalf("%d conversations made, want 2: %+v", len(convs), convs)
	}
	for _, cv := range convs {
		if !strings.HasPrefix(cv.Summary, "lettaq:") {
			t.Errorf("conversation %s summary %q", cv.ID, cv.Summary)
		}
	}
	for _, m := range e.sim.UserMessages(agent) {
		if m.ConversationID == "" {
			t.Errorf("message %s went to the agent endpoints", m.Otid)
		}
	}
}

// A worker that crashed between creating a chat's conversation and storing
// its id left a tagged conversation behind: the next turn finds it with
// summary_search and makes no second one. Without ordering, concurrent
// first turns of one chat still make one conversation (the short Redis
// lock).
func TestConversationFoundAgainAfterCrash(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	agent := e.sim.CreateAgent("crash", nil)
	c := e.conv("crash")
	// Another chat's conversation, with a tag that only shares a prefix.
	other := e.conv("other")
	e.sim.CreateConversation(agent, thread.Summary(agent, other.Integration, other.ChatID))
	orphan := e.sim.CreateConversation(agent, thread.Summary(agent, c.Integration, c.ChatID))
	e.startWorker("w1")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hello"})
	if final, evs := e.waitFinal(c, res.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	if rec := e.record(res.TaskID); rec.LettaConversationID != orphan {
		t.Fatalf("turn used %q, want the orphan %s", rec.LettaConversationID, orphan)
	}
	if n := len(e.sim.Conversations(agent)); n != 2 {
		t.Fatalf("%d conversations, want 2 (no new one)", n)
	}
}

func TestConversationCreatedOnceWithoutOrdering(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation), withoutOrdering())
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("race", nil)
	c := e.conv("race")
	var res []queue.EnqueueResult
	for i := range 6 {
		res = append(res, e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: fmt.Sprintf("m%d", i), Text: "hi"}))
	}
	for _, r := range res {
		if final, evs := e.waitFinal(c, r.TaskID, 40*time.Second); final.Type != record.EventAnswer {
			t.Fatalf("final %+v; %s", final, summarize(evs))
		}
	}
	convs := e.sim.Conversations(agent)
	if len(convs) != 1 {
		t.Fatalf("%d conversations for one chat: %+v", len(convs), convs)
	}
	if n := len(e.sim.ConversationUserMessages(convs[0].ID)); n != len(res) {
		t.Fatalf("conversation holds %d messages, want %d", n, len(res))
	}
}

// A payload may name the Letta conversation itself; in agent mode too.
func TestExplicitLettaConversation(t *testing.T) {
	e := newEnv(t) // agent mode
	e.startWorker("w1")
	agent := e.sim.CreateAgent("explicit", nil)
	conv := e.sim.CreateConversation(agent, "managed by the integration")
	c := e.conv("explicit")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "hi", LettaConversationID: conv})
	if final, evs := e.waitFinal(c, res.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	if got := e.sim.ConversationUserMessages(conv); len(got) != 1 || got[0].Otid != res.Otid {
		t.Fatalf("conversation holds %+v", got)
	}
	if rec := e.record(res.TaskID); rec.ThreadMode != "explicit" || rec.LettaConversationID != conv {
		t.Fatalf("journal thread %q %q", rec.ThreadMode, rec.LettaConversationID)
	}
	_, err := e.client.Enqueue(context.Background(), queue.Message{AgentID: agent, Conversation: c, Text: "x", LettaConversationID: "conv-demo"})
	if ve, ok := queue.IsValidationError(err); !ok || ve.Field != "letta_conversation_id" {
		t.Fatalf("bad conversation id: %v", err)
	}
}

// The fault matrix in conversation mode: every case ends as in agent mode,
// with one user message per otid.
func TestFaultsConversationMode(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	runFaultCases(t, e, faultMatrix())
}

// pendingApprovalFront answers every send whose body holds "hello?" with
// Letta's 409 pending approval, and passes the rest to the simulator.
func pendingApprovalFront(t *testing.T, e *env) {
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/messages") || strings.HasSuffix(r.URL.Path, "/messages/stream")) {
			b, _ := io.ReadAll(r.Body)
			if bytes.Contains(b, []byte("hello?")) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, `{"detail": "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call. Please approve or deny the pending request before continuing."}`)
				return
			}
			r.Body = io.NopCloser(bytes.NewReader(b))
		}
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.lettaURL = front.URL
}

// A pending approval lettaq did not record (asked through another client:
// here its record is deleted) refuses every new message with 409: the turn
// ends at once with a permanent error saying so, after one attempt (not
// 25). An approval lettaq knows of is met before the send (approval_test.go).
func TestPendingApprovalEndsTheTurn(t *testing.T) {
	for _, mode := range []queue.ThreadMode{queue.ThreadConversation, queue.ThreadAgent} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, withThreadMode(mode))
			pendingApprovalFront(t, e)
			e.startWorker("w1")
			agent := e.sim.CreateAgent("approval", &lettasim.Script{Steps: []lettasim.Step{
				{Kind: lettasim.ApprovalRequest, ToolName: "delete_files", Arguments: `{"path":"/"}`},
			}})
			c := e.conv("approval")
			r1 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "delete it"})
			if final, evs := e.waitFinal(c, r1.TaskID, 20*time.Second); final.Type != record.EventApprovalRequired {
				t.Fatalf("first turn: %+v; %s", final, summarize(evs))
			}
			keys, err := e.rdb.Keys(context.Background(), e.prefix+"approval:pending:*").Result()
			if err != nil || len(keys) != 1 {
				t.Fatalf("pending approval keys %v %v", keys, err)
			}
			e.rdb.Del(context.Background(), keys...)
			r2 := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello?"})
			final, evs := e.waitFinal(c, r2.TaskID, 20*time.Second)
			if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "waiting for approval of a tool call") {
				t.Fatalf("second turn: %+v; %s", final, summarize(evs))
			}
			if rec := e.record(r2.TaskID); len(rec.Attempts) != 1 {
				t.Fatalf("%d attempts: %s", len(rec.Attempts), describeAttempts(rec))
			}
			if n := e.sim.CountOtid(r2.Otid); n != 0 {
				t.Fatalf("refused message stored %d times", n)
			}
		})
	}
}

// lostJournal deletes the journal (record and intents) of every unfinished
// turn of the test whenever an attempt ends to be retried: the next attempt
// knows nothing of what the last one sent.
type lostJournal struct {
	queue.NopObserver
	e  *env
	mu sync.Mutex
	n  int
}

func (l *lostJournal) AttemptFinished(_, result string, _ time.Duration) {
	if result != "retry" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	ctx := context.Background()
	for _, pat := range []string{l.e.prefix + "journal:intents:*", l.e.prefix + "journal:turn:*"} {
		iter := l.e.rdb.Scan(ctx, 0, pat, 500).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if strings.Contains(pat, "turn:") {
				rec, err := l.e.journal.Get(ctx, strings.TrimPrefix(key, l.e.prefix+"journal:turn:"))
				if err == nil && (rec.Outcome == record.OutcomeAnswered || rec.Outcome == record.OutcomeFailed || rec.Outcome == record.OutcomeApprovalRequired) {
					continue
				}
			}
			if l.e.rdb.Del(ctx, key).Val() > 0 {
				l.n++
			}
		}
	}
}

// The fault matrix with a lost journal: a retry that finds no intent sends
// the message again, with the same otid. On the conversation endpoints the
// server's otid map of background sends replays the run: no duplicate. On
// the agent endpoints nothing does: the same faults store some messages
// twice. The journal gate is the first line of defence, the server's replay
// the second, and this test shows each.
func TestFaultsLostJournal(t *testing.T) {
	dups := map[queue.ThreadMode]int{}
	var mu sync.Mutex
	for _, mode := range []queue.ThreadMode{queue.ThreadConversation, queue.ThreadAgent} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, withThreadMode(mode))
			lj := &lostJournal{e: e}
			e.startWorker("w1", func(c *queue.WorkerConfig) { c.Observer = lj })
			var wg sync.WaitGroup
			for _, tc := range faultMatrix() {
				wg.Add(1)
				go func() {
					defer wg.Done()
					agent := e.sim.CreateAgent(tc.name, tc.script)
					if tc.fault != nil {
						e.sim.SetFault(agent, *tc.fault)
					}
					if tc.list != nil {
						e.sim.SetListFault(agent, *tc.list)
					}
					c := e.conv(tc.name)
					res := e.enqueue(queue.Message{AgentID: agent, Text: "lost " + tc.name, Conversation: c, MessageID: "m-" + tc.name})
					final, evs := e.waitFinal(c, res.TaskID, 60*time.Second)
					if final.Type != tc.final {
						t.Errorf("%s: final %s %q, want %s; %s", tc.name, final.Type, final.Text, tc.final, summarize(evs))
					}
					if n := e.sim.CountOtid(res.Otid); n > tc.stored {
						mu.Lock()
						dups[mode] += n - tc.stored
						mu.Unlock()
						t.Logf("%s: otid stored %d times", tc.name, n)
					}
				}()
			}
			wg.Wait()
			e.settled()
			t.Logf("%s mode: journal keys deleted %d, duplicate user messages %d", mode, lj.n, dups[mode])
			if lj.n == 0 {
				t.Fatal("no journal was lost: the test proves nothing")
			}
		})
	}
	if dups[queue.ThreadConversation] != 0 {
		t.Errorf("conversation mode stored %d duplicate user messages, want 0", dups[queue.ThreadConversation])
	}
	// Agent mode, which has no replay, shows what conversation mode is
	// spared: it stores a duplicate when a retry comes while the first run
	// is still unfinished (run-outlives-attempt). Whether that happens
	// depends on timing: under the load of the whole suite the first attempt
	// often sees the run end (it failed that way at eca12a0 too), so the
	// count is reported, not required.
	if dups[queue.ThreadAgent] == 0 {
		t.Logf("agent mode stored no duplicate this time: the run outlived no attempt, so conversation mode's 0 was not put to the test by that case")
	}
}

// Default mode with ordering per chat: the chats' turns meet on the agent's
// one thread, and Letta refuses all but one with 409 busy. Those turns are
// put back and answered later: no failure counted (Asynq's retry count
// stays 0), no resend, one user message each.
func TestDefaultModeBusyThreadPutsTurnsBack(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadDefault))
	e.startWorker("w1")
	agent := e.sim.CreateAgent("busy-default", nil)
	const chats = 3
	var convs []record.Conversation
	var res []queue.EnqueueResult
	for i := range chats {
		c := e.conv(fmt.Sprintf("chat%d", i))
		convs = append(convs, c)
		res = append(res, e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m",
			Text: fmt.Sprintf("[[sim think=%s answer=a%d]] from chat %d", simDur(400*time.Millisecond), i, i)}))
	}
	busy := 0
	for i, r := range res {
		final, evs := e.waitFinal(convs[i], r.TaskID, 60*time.Second)
		if final.Type != record.EventAnswer || final.Text != fmt.Sprintf("a%d", i) {
			t.Fatalf("chat %d: final %s %q; %s", i, final.Type, final.Text, summarize(evs))
		}
		if n := e.sim.CountOtid(r.Otid); n != 1 {
			t.Errorf("chat %d: otid stored %d times", i, n)
		}
		rec := e.record(r.TaskID)
		for _, a := range rec.Attempts {
			if a.Outcome == record.OutcomeBusy {
				busy++
			}
			if a.ResendDecision != "" && a.ResendDecision != record.ResendNotNeeded {
				t.Errorf("chat %d attempt %d: resend decision %q after busy", i, a.N, a.ResendDecision)
			}
		}
	}
	e.settled()
	for _, r := range res {
		info, err := e.insp.GetTaskInfo(e.queue, r.TaskID)
		if err != nil {
			t.Fatal(err)
		}
		if info.Retried != 0 {
			t.Errorf("task %s: Asynq counted %d failed tries; a busy thread is no failure", r.TaskID, info.Retried)
		}
	}
	checkSerialRuns(t, e.sim, agent, chats)
	if busy == 0 || e.sim.Conflicts() == 0 {
		t.Fatalf("no busy attempt (%d) or 409 (%d): the test proves nothing", busy, e.sim.Conflicts())
	}
	t.Logf("%d busy attempts, %d 409s", busy, e.sim.Conflicts())
}

// An agent Letta does not know fails the turn at once in conversation mode
// too (the conversation cannot be made), saying why; nothing is retried.
func TestConversationModeUnknownAgent(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	c := e.conv("unknown")
	res := e.enqueue(queue.Message{AgentID: "agent-00000000-0000-4000-8000-000000000000", Conversation: c, MessageID: "m", Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "Letta conversation") || !strings.Contains(final.Text, "404") {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	if rec := e.record(res.TaskID); len(rec.Attempts) != 1 {
		t.Fatalf("%d attempts: %s", len(rec.Attempts), describeAttempts(rec))
	}
}

// The simulator's own pending-approval refusal, on both endpoint kinds.
func TestPendingApprovalFromSimulator(t *testing.T) {
	for _, mode := range []queue.ThreadMode{queue.ThreadConversation, queue.ThreadDefault, queue.ThreadAgent} {
		t.Run(string(mode), func(t *testing.T) {
			e := newEnv(t, withThreadMode(mode))
			e.startWorker("w1")
			agent := e.sim.CreateAgent("pending", nil)
			c := e.conv("pending")
			res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m", Text: "[[sim pending_approval]] hi"})
			final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
			if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "waiting for approval of a tool call") {
				t.Fatalf("final %+v; %s", final, summarize(evs))
			}
			if rec := e.record(res.TaskID); len(rec.Attempts) != 1 {
				t.Fatalf("%d attempts: %s", len(rec.Attempts), describeAttempts(rec))
			}
		})
	}
}
