package approval

import (
	"context"
	"errors"
	"github.com/lettaq/lettaq/queue/internal/store"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/testkit"
	"github.com/lettaq/lettaq/queue/record"
)

// answers records the answers the part enqueued.
type answers struct {
	mu  sync.Mutex
	got []string // "<request> <cause> <at set>"
	err error
}

func (a *answers) Answer(_ context.Context, req, _, cause string, at time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.err != nil {
		return a.err
	}
	s := req + " " + cause
	if !at.IsZero() {
		s += " at"
	}
	a.got = append(a.got, s)
	return nil
}

func (a *answers) Close() error { return nil }

// journal is a journal in memory.
type journal map[string]*record.TurnRecord

func (j journal) Get(_ context.Context, id string) (*record.TurnRecord, error) {
	if r, ok := j[id]; ok {
		c := *r
		return &c, nil
	}
	return nil, errors.New("not found")
}

func (j journal) Save(_ context.Context, r *record.TurnRecord) error {
	c := *r
	j[r.TaskID] = &c
	return nil
}

// attempt is the attempt a Turn belongs to.
type attempt struct {
	runID    string
	approval *record.ApprovalRecord
	failed   bool
}

func (a *attempt) RunID() string                        { return a.runID }
func (a *attempt) SetApproval(r *record.ApprovalRecord) { a.approval = r }
func (a *attempt) RedisFailed()                         { a.failed = true }

type reads string

func (r reads) Pending() (string, error) { return string(r), nil }

type env struct {
	part  *Part
	ans   *answers
	jr    journal
	woken []string // "<request> <key>"
}

func newEnv(t *testing.T, pol Policy) *env {
	srv := testredis.RequireReal(t)
	rdb := srv.Client(t)
	prefix := testkit.Prefix(t, rdb)
	e := &env{ans: &answers{}, jr: journal{}}
	e.part = New(NewStore(rdb, store.Keys{Prefix: prefix}, time.Hour), Config{Timeout: time.Hour, Policy: pol, ThreadConversation: true,
		Answers: e.ans, Journal: e.jr, Wake: func(_ context.Context, req, key string) { e.woken = append(e.woken, req+" "+key) }})
	return e
}

var (
	quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
	chat  = record.Conversation{Integration: "web", ChatID: "c1"}
	calls = []record.ToolEvent{{Name: "delete_file", CallID: "call-1", Status: record.ToolStatusCall}}
)

// ask makes turn "turn:1" of chat ask for approval of calls.
func (e *env) ask(t *testing.T) *Pending {
	ctx := context.Background()
	at := &attempt{runID: "run-1"}
	asker := e.part.Turn(Ident{TaskID: "turn:1", Otid: "otid-1", AgentID: "agent-1", Conversation: chat, Key: "k"}, at, quiet)
	ev, err := asker.Ask(ctx, quiet, calls)
	if err != nil {
		t.Fatal(err)
	}
	if ev.RequestTaskID != "turn:1" || len(ev.Calls) != 1 || at.approval == nil || at.approval.RequestTaskID != "turn:1" {
		t.Fatalf("event %+v, record %+v", ev, at.approval)
	}
	p, err := e.part.Store().Get(ctx, "otid-1")
	if err != nil || p.RunID != "run-1" || p.Scope != "chat:"+chat.String() {
		t.Fatalf("request %+v %v", p, err)
	}
	e.jr["turn:1"] = &record.TurnRecord{TaskID: "turn:1"}
	return p
}

// A request is kept under its task id and otid with its expiry scheduled; a message of
// its chat meets it as the policy says.
func TestGateFollowsThePolicy(t *testing.T) {
	for pol, want := range map[Policy]string{Wait: "wait", Deny: "wait, denied", Fail: "fail"} {
		t.Run(want, func(t *testing.T) { gateFollows(t, pol, want) })
	}
}

func gateFollows(t *testing.T, pol Policy, want string) {
	e := newEnv(t, pol)
	p := e.ask(t)
	msg := e.part.Turn(Ident{TaskID: "turn:2", AgentID: "agent-1", Conversation: chat}, &attempt{}, quiet)
	g := msg.Gate(context.Background(), reads(p.RequestTaskID), true)
	got := ""
	switch {
	case g.Err != nil:
		got = "error " + g.Err.Error()
	case g.Wait:
		got = "wait"
	case strings.Contains(g.Fail, "turn:1"):
		got = "fail"
	}
	if len(e.ans.got) == 2 && e.ans.got[1] == "turn:1 "+record.AnswerMovedOn {
		got += ", denied"
	}
	if got != want || g.Open == nil || g.Open.RequestTaskID != "turn:1" || e.ans.got[0] != "turn:1 "+record.AnswerExpired+" at" {
		t.Errorf("policy %d: %q (%+v, answers %q), want %q", pol, got, g, e.ans.got, want)
	}
	if g := msg.Gate(context.Background(), reads(""), true); g.Wait || g.Fail != "" || g.Err != nil {
		t.Errorf("policy %d: no request pending: %+v, want to go on", pol, g)
	}
}

// An answer turn that reached Letta answers the request: its record, the requesting turn's
// journal and the waiters are told, and a message goes on; a second answer fails.
func TestAnsweredTellsTheRequest(t *testing.T) {
	e := newEnv(t, Wait)
	ctx := context.Background()
	p := e.ask(t)
	id := p.NextAnswerTaskID()
	ans := &record.Answer{RequestTaskID: "turn:1", Decisions: []record.ApprovalVerdict{{ToolCallID: "call-1", Approve: true}}, Cause: record.AnswerByUser}
	at := &attempt{runID: "run-2"}
	ansTurn := e.part.Turn(Ident{TaskID: id, Key: "k", Answer: ans, EnqueuedAt: p.RequestedAt.Add(time.Minute)}, at, quiet)
	if g := ansTurn.Gate(ctx, nil, true); len(g.Answers) != 1 || !g.Answers[0].Approve || g.Wait || g.Fail != "" {
		t.Fatalf("answer's gate %+v, want its answers", g)
	}
	ansTurn.Ended(ctx, quiet, false)
	got, err := e.part.Store().Get(ctx, "turn:1")
	if err != nil || got.AnsweredBy != id || got.Decision != "approved" {
		t.Fatalf("request %+v %v, want answered by %s", got, err, id)
	}
	if at.approval == nil || at.approval.Waited != time.Minute || e.jr["turn:1"].Approval == nil || e.jr["turn:1"].Approval.AnsweredBy != id {
		t.Errorf("answer's record %+v, requesting turn's %+v", at.approval, e.jr["turn:1"].Approval)
	}
	if len(e.woken) != 1 || e.woken[0] != "turn:1 k" {
		t.Errorf("woken %q", e.woken)
	}
	msg := e.part.Turn(Ident{TaskID: "turn:2", AgentID: "agent-1", Conversation: chat}, &attempt{}, quiet)
	if g := msg.Gate(ctx, reads("turn:1"), true); g.Wait || g.Fail != "" || g.Err != nil {
		t.Errorf("message after the answer: %+v, want to go on", g)
	}
	other := e.part.Turn(Ident{TaskID: "answer:other", Answer: ans}, &attempt{}, quiet)
	if g := other.Gate(ctx, nil, false); !strings.Contains(g.Fail, "already answered by "+id) {
		t.Errorf("a second answer's gate %+v, want it to fail", g)
	}
}

// An answer turn that failed before its answer reached Letta (no run) leaves the request
// pending under a new answer id with its expiry scheduled again; a message whose gate finds
// the answer ended without the request told settles it from the answer's journal.
func TestFailedAnswerLeavesTheRequestPending(t *testing.T) {
	e := newEnv(t, Wait)
	ctx := context.Background()
	p := e.ask(t)
	id := p.NextAnswerTaskID()
	ans := &record.Answer{RequestTaskID: "turn:1", Decisions: []record.ApprovalVerdict{{ToolCallID: "call-1"}}, Cause: record.AnswerByUser}
	failed := e.part.Turn(Ident{TaskID: id, Answer: ans}, &attempt{}, quiet)
	failed.Ended(ctx, quiet, true)
	got, err := e.part.Store().Get(ctx, "turn:1")
	if err != nil || got.AnsweredBy != "" || len(got.FailedAnswers) != 1 || got.NextAnswerTaskID() != AnswerTaskIDAfter("turn:1", 1) {
		t.Fatalf("request %+v %v, want pending with one failed answer", got, err)
	}
	if n := len(e.ans.got); n != 2 || e.ans.got[1] != "turn:1 "+record.AnswerExpired+" at" {
		t.Errorf("answers %q, want the expiry scheduled again", e.ans.got)
	}
	// The next answer ended (its run known) but the request was not told.
	next := got.NextAnswerTaskID()
	e.jr[next] = &record.TurnRecord{TaskID: next, Outcome: record.OutcomeAnswered, RunID: "run-3", FinishedAt: time.Now()}
	msg := e.part.Turn(Ident{TaskID: "turn:2", AgentID: "agent-1", Conversation: chat, Key: "k2"}, &attempt{}, quiet)
	if g := msg.Gate(ctx, reads("turn:1"), true); g.Wait || g.Fail != "" || g.Err != nil {
		t.Errorf("message after the settled answer: %+v, want to go on", g)
	}
	if got, _ := e.part.Store().Get(ctx, "turn:1"); got == nil || got.AnsweredBy != next {
		t.Errorf("request %+v, want answered by %s", got, next)
	}
}

func TestAnswerTaskIDs(t *testing.T) {
	long := strings.Repeat("x", maxAnswerTaskID)
	for _, c := range []struct {
		req    string
		failed int
		want   string
	}{
		{"turn:a", 0, "answer:turn:a"},
		{"turn:a", 1, "answer#2:turn:a"},
		{long, 0, "answer:h:"},
		{long, 2, "answer#3:h:"},
		// A sharded request's answer stays in its shard, hashed or not.
		{"turn:{q-1-2}:a", 0, "answer:turn:{q-1-2}:a"},
		{"turn:{q-1-2}:" + long, 0, "answer:{q-1-2}:h:"},
		{"turn:{q-1-2}:" + long, 1, "answer#2:{q-1-2}:h:"},
	} {
		got := AnswerTaskIDAfter(c.req, c.failed)
		if !strings.HasPrefix(got, c.want) || len(got) > maxAnswerTaskID || (!strings.HasSuffix(c.req, long) && got != c.want) {
			t.Errorf("AnswerTaskIDAfter(%.12s…, %d) = %q, want %q", c.req, c.failed, got, c.want)
		}
	}
	if Summary([]record.ApprovalVerdict{{Approve: true}, {}}) != "mixed" || Summary([]record.ApprovalVerdict{{}}) != "denied" || Summary([]record.ApprovalVerdict{{Approve: true}}) != "approved" {
		t.Error("Summary")
	}
}
