package integration

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A Letta whose resume ignores starting_after (it replays the run's stream
// from its start): the turn's stream is cut after the answer, the follow
// resumes the run, and the answer is delivered once, not "Hello world!"
// twice over.
func TestResumeThatReplaysDeliversTheAnswerOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	agent := e.sim.CreateAgent("replay", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "Hello world!"},
		{Kind: lettasim.Reasoning, Text: "Anything else?", Delay: simDur(500 * time.Millisecond)},
	}})
	e.sim.SetFault(agent, lettasim.Fault{DisconnectAfter: 2, IgnoreStartingAfter: true})
	c := e.conv("replay")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer || final.Text != "Hello world!" {
		t.Fatalf("final %s %q, want the answer once; %s; attempts: %s", final.Type, final.Text, summarize(evs), describeAttempts(e.record(res.TaskID)))
	}
	if rec := e.record(res.TaskID); len(rec.Attempts) != 1 || rec.Attempts[0].Resumes == 0 {
		t.Errorf("want one attempt that resumed: %s", describeAttempts(rec))
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Errorf("%d messages with the otid, want 1", n)
	}
}

// A Letta whose run messages ignore the after cursor and list each page
// newest first: a turn whose stream stalls (the run ends meanwhile) and
// whose resume is refused polls the run, and delivers its answers in their
// order, once.
func TestPollOnMisorderedListsDeliversTheAnswerInOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	agent := e.sim.CreateAgent("misordered", &lettasim.Script{Steps: []lettasim.Step{
		{Kind: lettasim.Reasoning, Text: "Thinking."},
		{Kind: lettasim.Assistant, Text: "first", Delay: simDur(300 * time.Millisecond)},
		{Kind: lettasim.Assistant, Text: "second"},
		{Kind: lettasim.Assistant, Text: "third"},
	}})
	e.sim.SetFault(agent, lettasim.Fault{StallAfter: 2, StallFor: lettasim.Forever, ResumeStatus: 503})
	e.sim.SetListFault(agent, lettasim.ListFault{IgnoreAfter: true, ReverseOrder: true})
	c := e.conv("misordered")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	if want := "first\n\nsecond\n\nthird"; final.Type != record.EventAnswer || final.Text != want {
		t.Fatalf("final %s %q, want %q; %s; attempts: %s", final.Type, final.Text, want, summarize(evs), describeAttempts(e.record(res.TaskID)))
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Errorf("%d messages with the otid, want 1", n)
	}
}

// A conversation deleted while its turn's send was on the way (the message
// stored, the connection dropped before any answer, the conversation gone
// before the worker looks for the otid): every read of it answers 404, and
// the turn ends at once with a permanent error, after one attempt, instead
// of StillRunning after each attempt's admission grace until its retries
// are spent.
func TestConversationDeletedMidTurnEndsTheTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if id, ok := strings.CutPrefix(r.URL.Path, "/v1/conversations/"); ok && r.Method == http.MethodPost && strings.HasSuffix(id, "/messages") {
			// The send's connection drops (a panic the server recovers): the
			// conversation is deleted on the way.
			defer e.sim.DeleteConversation(strings.TrimSuffix(id, "/messages"))
		}
		e.sim.ServeHTTP(w, r)
	}))
	t.Cleanup(front.Close)
	e.lettaURL = front.URL
	e.startWorker("w1")
	agent := e.sim.CreateAgent("deleted", nil)
	e.sim.SetFault(agent, lettasim.Fault{DropBeforeResponse: true})
	c := e.conv("deleted")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, Text: "hi"})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	rec := e.record(res.TaskID)
	if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, "no longer exists") {
		t.Fatalf("final %s %q, want a permanent error saying the thread is gone; %s; attempts: %s", final.Type, final.Text, summarize(evs), describeAttempts(rec))
	}
	if len(rec.Attempts) != 1 {
		t.Errorf("%d attempts, want 1: %s", len(rec.Attempts), describeAttempts(rec))
	}
	if n := e.sim.SendAttempts(res.Otid); n != 1 {
		t.Errorf("%d sends, want 1", n)
	}
}
