package integration

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// Approvals end to end: two workers in conversation mode, the simulator's
// real pending approvals.

// approvalEnv starts two workers (mods apply to both) in conversation mode.
func approvalEnv(t *testing.T, mods ...func(*queue.WorkerConfig)) *env {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	e.startWorker("w1", mods...)
	e.startWorker("w2", mods...)
	return e
}

// requestApproval sends a message whose run asks approval for tools, and
// returns its enqueue result and approval_required event.
func (e *env) requestApproval(agent string, c record.Conversation, id, tools string) (queue.EnqueueResult, record.ReplyEvent) {
	e.t.Helper()
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: id, Text: "[[sim approval=" + tools + "]] tidy up"})
	final, evs := e.waitFinal(c, res.TaskID, 20*time.Second)
	if final.Type != record.EventApprovalRequired || final.Approval == nil {
		e.t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	return res, final
}

// oneMessagePerOtid checks that the simulator stored each turn's message
// once, and that each turn wrote one final event.
func (e *env) oneMessagePerOtid(c record.Conversation, results ...queue.EnqueueResult) {
	e.t.Helper()
	e.settled()
	for _, r := range results {
		if n := e.sim.CountOtid(r.Otid); n != 1 {
			e.t.Errorf("task %s: %d messages with otid %s at the simulator, want 1", r.TaskID, n, r.Otid)
		}
		if n := countFinal(e.events(c, r.TaskID)); n != 1 {
			e.t.Errorf("task %s: %d final events, want 1: %s", r.TaskID, n, summarize(e.events(c, r.TaskID)))
		}
	}
}

// The approval_required event names every pending call, the run and the
// task to answer; approving runs the tool and the run answers; denying
// tells the model, whose answer says so. The same answer sent twice is one
// turn; the journal records the request as answered.
func TestApprovalApproveAndDeny(t *testing.T) {
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr", nil)
	c := e.conv("appr")

	req, ev := e.requestApproval(agent, c, "m1", "delete_file")
	a := ev.Approval
	if a.RequestTaskID != req.TaskID || len(a.Calls) != 1 || a.Calls[0].Name != "delete_file" || a.Calls[0].CallID == "" ||
		ev.RunID == "" || ev.TaskID != req.TaskID || a.ExpiresAt.IsZero() {
		t.Fatalf("approval_required %+v approval %+v", ev, a)
	}
	pending, ok := e.sim.PendingApproval(agent, e.record(req.TaskID).LettaConversationID)
	if !ok || pending.Calls[0].ID != a.Calls[0].CallID {
		t.Fatalf("simulator pending %+v %v, event calls %+v", pending, ok, a.Calls)
	}
	// Pressed twice, at once: one turn.
	var wg sync.WaitGroup
	results := make([]queue.EnqueueResult, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := e.client.Approve(context.Background(), req.Otid, "")
			if err != nil {
				t.Error(err)
			}
			results[i] = r
		}()
	}
	wg.Wait()
	ans := results[0]
	if results[1].TaskID != ans.TaskID || ans.TaskID != queue.AnswerTaskID(req.TaskID) {
		t.Fatalf("two presses: %+v", results)
	}
	final, evs := e.waitFinal(c, ans.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || strings.Contains(final.Text, "did not") || !ranTool(evs, "delete_file") {
		t.Fatalf("after approval: %+v; %s", final, summarize(evs))
	}
	if evs[0].Type != record.EventAccepted || evs[0].Approval == nil || evs[0].Approval.Decision != "approved" || evs[0].Approval.RequestTaskID != req.TaskID {
		t.Errorf("the answer's accepted event %+v", evs[0])
	}
	if again, err := e.client.Deny(context.Background(), req.TaskID, "late"); err != nil || !again.Duplicate || again.TaskID != ans.TaskID {
		t.Errorf("an answer after the answer: %+v %v", again, err)
	}
	msgs := e.sim.ApprovalMessages(agent)
	if len(msgs) != 1 || msgs[0].Otid != ans.Otid || len(msgs[0].Approvals) != 1 || !msgs[0].Approvals[0].Approve {
		t.Fatalf("approval messages at the simulator: %+v", msgs)
	}

	// Deny, with a reason the model is told.
	req2, _ := e.requestApproval(agent, c, "m2", "delete_file")
	den, err := e.client.Deny(context.Background(), req2.TaskID, "not today")
	if err != nil {
		t.Fatal(err)
	}
	final, evs = e.waitFinal(c, den.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || !strings.Contains(final.Text, "did not run delete_file") || !strings.Contains(final.Text, "not today") {
		t.Fatalf("after denial: %+v; %s", final, summarize(evs))
	}
	e.oneMessagePerOtid(c, req, ans, req2, den)
	rec := e.record(ans.TaskID)
	if rec.Outcome != record.OutcomeAnswered || rec.Approval == nil || rec.Approval.RequestTaskID != req.TaskID || rec.Approval.Cause != record.AnswerByUser {
		t.Errorf("answer journal %+v", rec)
	}
	ra := e.record(req.TaskID).Approval
	if ra == nil || ra.AnsweredBy != ans.TaskID || ra.Decision != "approved" || ra.Waited <= 0 || len(ra.Calls) != 1 || ra.RequestedAt.IsZero() {
		t.Errorf("request journal %+v", ra)
	}
}

// Parallel calls of one step: an answer that leaves one out is refused at
// enqueue naming it; answered together (one approved, one denied) in one
// message.
func TestApprovalParallelCallsAnsweredTogether(t *testing.T) {
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr-par", nil)
	c := e.conv("par")
	req, ev := e.requestApproval(agent, c, "m1", "read_file,delete_file")
	calls := ev.Approval.Calls
	if len(calls) != 2 {
		t.Fatalf("calls %+v", calls)
	}
	_, err := e.client.AnswerApproval(context.Background(), queue.ApprovalReply{Request: req.TaskID,
		Decisions: []record.ApprovalVerdict{{ToolCallID: calls[0].CallID, Approve: true}}})
	if ve, ok := queue.IsValidationError(err); !ok || !strings.Contains(ve.Error(), calls[1].CallID) {
		t.Fatalf("partial answer: %v", err)
	}
	ans, err := e.client.AnswerApproval(context.Background(), queue.ApprovalReply{Request: req.TaskID,
		Decisions: []record.ApprovalVerdict{{ToolCallID: calls[1].CallID, Approve: false, Reason: "keep it"}, {ToolCallID: calls[0].CallID, Approve: true}}})
	if err != nil {
		t.Fatal(err)
	}
	final, evs := e.waitFinal(c, ans.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || !strings.Contains(final.Text, "did not run delete_file") {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	msgs := e.sim.ApprovalMessages(agent)
	if len(msgs) != 1 || len(msgs[0].Approvals) != 2 {
		t.Fatalf("approval messages %+v", msgs)
	}
	e.oneMessagePerOtid(c, req, ans)
}

// An approved call whose run asks again: the answer turn ends with a new
// approval_required, itself answerable.
func TestApprovalAnswerAsksAgain(t *testing.T) {
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr-again", nil)
	c := e.conv("again")
	res := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "[[sim approval=a then_approval=b]] go"})
	if final, evs := e.waitFinal(c, res.TaskID, 20*time.Second); final.Type != record.EventApprovalRequired {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	first, err := e.client.Approve(context.Background(), res.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	final, evs := e.waitFinal(c, first.TaskID, 20*time.Second)
	if final.Type != record.EventApprovalRequired || final.Approval.RequestTaskID != first.TaskID || final.Approval.Calls[0].Name != "b" {
		t.Fatalf("second request %+v; %s", final, summarize(evs))
	}
	second, err := e.client.Approve(context.Background(), final.Approval.RequestTaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	if final, evs := e.waitFinal(c, second.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	e.oneMessagePerOtid(c, res, first, second)
}

// A message that comes while an approval is pending, under each policy.
func TestApprovalPolicies(t *testing.T) {
	for _, pol := range []queue.ApprovalPolicy{queue.ApprovalWait, queue.ApprovalDeny, queue.ApprovalError} {
		t.Run(string(pol), func(t *testing.T) {
			e := approvalEnv(t, func(c *queue.WorkerConfig) { c.Approvals.Policy = pol })
			agent := e.sim.CreateAgent("appr-pol", nil)
			c := e.conv("pol")
			req, _ := e.requestApproval(agent, c, "m1", "delete_file")
			msg := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "never mind, hello"})
			switch pol {
			case queue.ApprovalWait:
				// The message waits (its event says so) and is not sent.
				e.waitEvent(c, msg.TaskID, func(ev record.ReplyEvent) bool {
					return ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval && ev.Approval != nil && ev.Approval.RequestTaskID == req.TaskID
				})
				if n := e.sim.CountOtid(msg.Otid); n != 0 {
					t.Fatalf("the waiting message was sent (%d)", n)
				}
				ans, err := e.client.Approve(context.Background(), req.TaskID, "")
				if err != nil {
					t.Fatal(err)
				}
				if final, evs := e.waitFinal(c, msg.TaskID, 20*time.Second); final.Type != record.EventAnswer || final.Text != "you said: never mind, hello" {
					t.Fatalf("message after the answer: %+v; %s", final, summarize(evs))
				}
				af := e.finalOf(c, ans.TaskID)
				if af.Type != record.EventAnswer || af.ID >= e.finalOf(c, msg.TaskID).ID {
					t.Fatalf("the answer %+v did not come before the message", af)
				}
				e.oneMessagePerOtid(c, req, ans, msg)
			case queue.ApprovalDeny:
				final, evs := e.waitFinal(c, msg.TaskID, 20*time.Second)
				if final.Type != record.EventAnswer || final.Text != "you said: never mind, hello" {
					t.Fatalf("message: %+v; %s", final, summarize(evs))
				}
				ans := queue.EnqueueResult{TaskID: queue.AnswerTaskID(req.TaskID)}
				af, aevs := e.waitFinal(c, ans.TaskID, 5*time.Second)
				if af.Type != record.EventAnswer || !strings.Contains(af.Text, "did not run delete_file") || !strings.Contains(af.Text, "moved on") ||
					aevs[0].Approval == nil || aevs[0].Approval.Cause != record.AnswerMovedOn {
					t.Fatalf("the denial: %+v; %s", af, summarize(aevs))
				}
				ans.Otid = af.Otid
				e.oneMessagePerOtid(c, req, ans, msg)
			case queue.ApprovalError:
				final, evs := e.waitFinal(c, msg.TaskID, 20*time.Second)
				if final.Type != record.EventError || !final.Permanent || !strings.Contains(final.Text, req.TaskID) {
					t.Fatalf("message: %+v; %s", final, summarize(evs))
				}
				if n := e.sim.CountOtid(msg.Otid); n != 0 {
					t.Fatalf("the refused message was sent (%d)", n)
				}
				ans, err := e.client.Approve(context.Background(), req.TaskID, "")
				if err != nil {
					t.Fatal(err)
				}
				if final, _ := e.waitFinal(c, ans.TaskID, 20*time.Second); final.Type != record.EventAnswer {
					t.Fatalf("the answer: %+v", final)
				}
				e.settled()
				if n := countFinal(e.events(c, msg.TaskID)); n != 1 {
					t.Errorf("%d final events of the refused message", n)
				}
			}
		})
	}
}

// An approval nobody answers is denied when it expires, with a reason the
// model is told; the chat goes on.
func TestApprovalExpires(t *testing.T) {
	e := approvalEnv(t, func(c *queue.WorkerConfig) { c.Approvals.Timeout = 1500 * time.Millisecond })
	agent := e.sim.CreateAgent("appr-exp", nil)
	c := e.conv("exp")
	req, ev := e.requestApproval(agent, c, "m1", "delete_file")
	if d := time.Until(ev.Approval.ExpiresAt); d <= 0 || d > 2*time.Second {
		t.Fatalf("expires_at %v", ev.Approval.ExpiresAt)
	}
	exp := queue.EnqueueResult{TaskID: queue.AnswerTaskID(req.TaskID)}
	final, evs := e.waitFinal(c, exp.TaskID, 20*time.Second)
	if final.Type != record.EventAnswer || !strings.Contains(final.Text, "did not run delete_file") || !strings.Contains(final.Text, "nobody answered") ||
		evs[0].Approval == nil || evs[0].Approval.Cause != record.AnswerExpired {
		t.Fatalf("expiry: %+v; %s", final, summarize(evs))
	}
	exp.Otid = final.Otid
	e.settled()
	if ra := e.record(req.TaskID).Approval; ra == nil || ra.Cause != record.AnswerExpired || ra.Decision != "denied" || ra.Waited < time.Second {
		t.Errorf("request journal %+v", ra)
	}
	if late, err := e.client.Approve(context.Background(), req.TaskID, ""); err != nil || !late.Duplicate {
		t.Errorf("an answer after the expiry: %+v %v", late, err)
	}
	msg := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "hello again"})
	if final, _ := e.waitFinal(c, msg.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("the chat is blocked: %+v", final)
	}
	e.oneMessagePerOtid(c, req, exp, msg)
}

// The answer's stream is lost: the turn continues the run and delivers
// once, without a second approval message.
func TestApprovalAnswerStreamLost(t *testing.T) {
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr-lost", nil)
	c := e.conv("lost")
	req, _ := e.requestApproval(agent, c, "m1", "delete_file")
	e.sim.SetFault(agent, lettasim.Fault{DisconnectAfter: 2})
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	final, evs := e.waitFinal(c, ans.TaskID, 30*time.Second)
	if final.Type != record.EventAnswer || strings.Contains(final.Text, "did not") {
		t.Fatalf("final %+v; %s", final, summarize(evs))
	}
	rec := e.record(ans.TaskID)
	e.oneMessagePerOtid(c, req, ans)
	if !strings.Contains(describeAttempts(rec), "recovering") {
		t.Errorf("the lost stream was not recovered: %s", describeAttempts(rec))
	}
}

// ranTool reports whether evs show the tool's successful return.
func ranTool(evs []record.ReplyEvent, name string) bool {
	for _, ev := range evs {
		if ev.Type == record.EventTool && ev.Tool.Name == name && ev.Tool.Status == record.ToolStatusSuccess {
			return true
		}
	}
	return false
}

// waitEvent waits for an event of taskID that ok accepts.
func (e *env) waitEvent(c record.Conversation, taskID string, ok func(record.ReplyEvent) bool) record.ReplyEvent {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	last := "0"
	var seen []record.ReplyEvent
	for ctx.Err() == nil {
		got, next, err := e.replies.Read(ctx, c, last, 100, 200*time.Millisecond)
		if err != nil && ctx.Err() == nil {
			e.t.Fatal(err)
		}
		last = next
		for _, ev := range got {
			if ev.TaskID == taskID {
				seen = append(seen, ev)
				if ok(ev) {
					return ev
				}
			}
		}
	}
	e.t.Fatalf("no such event of %s: %s", taskID, summarize(seen))
	return record.ReplyEvent{}
}

// finalOf returns the final event of taskID in c's stream.
func (e *env) finalOf(c record.Conversation, taskID string) record.ReplyEvent {
	for _, ev := range e.events(c, taskID) {
		if ev.Type.Final() && (ev.Type != record.EventError || ev.Permanent) {
			return ev
		}
	}
	e.t.Fatalf("no final event of %s", taskID)
	return record.ReplyEvent{}
}

// On the agent's default thread (thread mode default), which every chat of
// the agent shares, a pending approval asked in one chat holds the
// messages of another chat too (policy wait) until it is answered.
func TestApprovalBlocksTheSharedThread(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadDefault))
	e.startWorker("w1")
	e.startWorker("w2")
	agent := e.sim.CreateAgent("appr-shared", nil)
	a, b := e.conv("a"), e.conv("b")
	req, _ := e.requestApproval(agent, a, "m1", "delete_file")
	msg := e.enqueue(queue.Message{AgentID: agent, Conversation: b, MessageID: "m1", Text: "hello from b"})
	e.waitEvent(b, msg.TaskID, func(ev record.ReplyEvent) bool {
		return ev.Type == record.EventPhase && ev.Phase == record.PhaseAwaitingApproval && ev.Approval.RequestTaskID == req.TaskID
	})
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	if final, evs := e.waitFinal(b, msg.TaskID, 20*time.Second); final.Type != record.EventAnswer || final.Text != "you said: hello from b" {
		t.Fatalf("chat b: %+v; %s", final, summarize(evs))
	}
	if final, _ := e.waitFinal(a, ans.TaskID, 20*time.Second); final.Type != record.EventAnswer {
		t.Fatalf("the answer: %+v", final)
	}
	e.oneMessagePerOtid(a, req, ans)
	e.oneMessagePerOtid(b, msg)
}
