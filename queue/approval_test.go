package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// approvalClient is a Client with ordering and replies under a prefix of
// the test's own, and the pending approval req of two calls.
func approvalClient(t *testing.T) (*Client, *Replies, *approval.Pending, string) {
	srv := testredis.RequireReal(t)
	q := "lettaq-unit-appr-" + time.Now().Format("150405.000000")
	prefix := "lettaq-unit:" + q + ":"
	rdb := srv.Client(t)
	replies := NewReplies(rdb, RepliesOptions{Prefix: prefix})
	ord := Ordering{Config: ordering.Config{Prefix: prefix + "ord:"}}
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Queue: q, Ordering: ord, Replies: replies})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB})
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		_ = c.Close()
		rdb.Del(ctx, shard.RecordKey(q))
		iter := rdb.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			rdb.Del(ctx, iter.Val())
		}
	})
	p := &approval.Pending{RequestTaskID: "turn:web:chat-1:m1", Otid: "0d6f6a3c-3f0c-5b2e-8a8e-6a3f3c2b1a00", RunID: "run-1",
		AgentID: "agent-1", Conversation: record.Conversation{Integration: "web", ChatID: "chat-1"}, Queue: q,
		Calls:       []record.ToolEvent{{Name: "delete_file", CallID: "call-1", Arguments: `{"path":"a"}`}, {Name: "delete_file", CallID: "call-2", Arguments: `{"path":"b"}`}},
		RequestedAt: time.Now().UTC(), ExpiresAt: time.Now().Add(time.Hour).UTC()}
	if err := newApprovals(replies).Save(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	return c, replies, p, q
}

// A partial answer is refused at enqueue naming the missing call ids; a
// call that is not pending is refused naming it; nothing is enqueued.
func TestAnswerApprovalRefusesPartialAnswers(t *testing.T) {
	c, _, p, _ := approvalClient(t)
	ctx := context.Background()
	_, err := c.AnswerApproval(ctx, ApprovalReply{Request: p.RequestTaskID, Decisions: []record.ApprovalVerdict{{ToolCallID: "call-1", Approve: true}}})
	ve, ok := IsValidationError(err)
	if !ok || ve.Field != "approval.decisions" || !strings.Contains(err.Error(), "call-2") || strings.Contains(err.Error(), "call-1,") {
		t.Fatalf("partial answer: %v, want a validation error naming call-2", err)
	}
	_, err = c.AnswerApproval(ctx, ApprovalReply{Request: p.RequestTaskID, Decisions: []record.ApprovalVerdict{
		{ToolCallID: "call-1"}, {ToolCallID: "call-2"}, {ToolCallID: "call-9"}}})
	if ve, ok := IsValidationError(err); !ok || !strings.Contains(ve.Error(), "call-9") {
		t.Fatalf("unknown call: %v", err)
	}
	if _, err := c.AnswerApproval(ctx, ApprovalReply{Request: "turn:nope"}); !errors.Is(err, ErrNoApproval) {
		t.Fatalf("unknown request: %v, want ErrNoApproval", err)
	}
}

// The answer is one task per request (pressed twice: a duplicate), found by
// task id or otid, put at the front of the chat's line, its accepted event
// saying what was answered; every pending call is answered.
func TestAnswerApprovalOneTaskAtTheFront(t *testing.T) {
	c, replies, p, q := approvalClient(t)
	ctx := context.Background()
	waiting, err := c.Enqueue(ctx, Message{AgentID: p.AgentID, Text: "later", Conversation: p.Conversation, MessageID: "m2"})
	if err != nil {
		t.Fatal(err)
	}
	res, err := c.Deny(ctx, p.Otid, "not today")
	if err != nil {
		t.Fatal(err)
	}
	if res.TaskID != AnswerTaskID(p.RequestTaskID) || res.Duplicate || res.Position != 0 {
		t.Fatalf("answer %+v, want task %s at position 0", res, AnswerTaskID(p.RequestTaskID))
	}
	if pos, _ := c.seq.Position(ctx, c.cfg.Ordering.Key(Message{AgentID: p.AgentID, Conversation: p.Conversation}), waiting.TaskID); pos != 1 {
		t.Errorf("the waiting message is at %d, want 1 (behind the answer)", pos)
	}
	again, err := c.Approve(ctx, p.RequestTaskID, "")
	if err != nil || !again.Duplicate || again.TaskID != res.TaskID {
		t.Fatalf("second press: %+v %v, want a duplicate of %s", again, err, res.TaskID)
	}
	insp := asynq.NewInspector(c.cfg.Redis)
	defer insp.Close()
	info, err := insp.GetTaskInfo(q, res.TaskID)
	if err != nil {
		t.Fatal(err)
	}
	m, err := DecodePayload(info.Payload)
	if err != nil {
		t.Fatal(err)
	}
	a := m.Approval
	if a == nil || len(a.Decisions) != 2 || a.Decisions[0].Approve || a.Decisions[1].Reason != "not today" || a.Cause != record.AnswerByUser {
		t.Fatalf("payload %+v", a)
	}
	evs, _, err := replies.Read(ctx, p.Conversation, "0", 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	var got *record.ApprovalEvent
	for _, ev := range evs {
		if ev.TaskID == res.TaskID && ev.Type == record.EventAccepted {
			got = ev.Approval
		}
	}
	if got == nil || got.Decision != "denied" || got.RequestTaskID != p.RequestTaskID || got.Reason != "not today" {
		t.Fatalf("accepted event approval %+v", got)
	}
}

// An answer replaces the scheduled expiry of the same request; an expiry
// that already ran makes a later answer a duplicate.
func TestAnswerApprovalReplacesScheduledExpiry(t *testing.T) {
	c, _, p, q := approvalClient(t)
	ctx := context.Background()
	exp, err := c.AnswerApproval(ctx, ApprovalReply{Request: p.RequestTaskID, Reason: "expired", cause: record.AnswerExpired, processAt: p.ExpiresAt})
	if err != nil || exp.Duplicate {
		t.Fatalf("expiry: %+v %v", exp, err)
	}
	insp := asynq.NewInspector(c.cfg.Redis)
	defer insp.Close()
	if info, err := insp.GetTaskInfo(q, exp.TaskID); err != nil || info.State != asynq.TaskStateScheduled {
		t.Fatalf("expiry task %v %v, want scheduled", info, err)
	}
	res, err := c.Approve(ctx, p.RequestTaskID, "")
	if err != nil || res.Duplicate {
		t.Fatalf("answer before the expiry: %+v %v", res, err)
	}
	info, err := insp.GetTaskInfo(q, res.TaskID)
	if err != nil || info.State != asynq.TaskStatePending {
		t.Fatalf("answer task %v %v, want pending", info, err)
	}
	m, _ := DecodePayload(info.Payload)
	if m.Approval.Cause != record.AnswerByUser || !m.Approval.Decisions[0].Approve {
		t.Fatalf("the expiry was not replaced: %+v", m.Approval)
	}
}

func TestApprovalAndImagePayloadValidation(t *testing.T) {
	conv := record.Conversation{Integration: "web", ChatID: "c"}
	ans := &record.Answer{RequestTaskID: "turn:x", Decisions: []record.ApprovalVerdict{{ToolCallID: "call-1", Approve: true}}}
	big := strings.Repeat("A", MaxImageBytes*4/3+8)
	for field, m := range map[string]Message{
		"text":                               {AgentID: "a", Text: "hi", Conversation: conv, Approval: ans},
		"approval.decisions":                 {AgentID: "a", Conversation: conv, Approval: &record.Answer{RequestTaskID: "turn:x"}},
		"approval.request_task_id":           {AgentID: "a", Conversation: conv, Approval: &record.Answer{Decisions: ans.Decisions}},
		"approval.decisions[1].tool_call_id": {AgentID: "a", Conversation: conv, Approval: &record.Answer{RequestTaskID: "r", Decisions: []record.ApprovalVerdict{{ToolCallID: "c"}, {ToolCallID: "c"}}}},
		"images":                             {AgentID: "a", Text: "t", Conversation: conv, Images: make([]Image, MaxImages+1)},
		"images[0].url":                      {AgentID: "a", Text: "t", Conversation: conv, Images: []Image{{URL: "file:///etc/passwd"}}},
		"images[1].media_type":               {AgentID: "a", Conversation: conv, Images: []Image{{URL: "https://x.test/a.png"}, {MediaType: "text/html", Data: "QQ=="}}},
		"images[0].data":                     {AgentID: "a", Conversation: conv, Images: []Image{{MediaType: "image/png", Data: big}}},
	} {
		err := m.Validate()
		if ve, ok := IsValidationError(err); !ok || ve.Field != field {
			t.Errorf("%s: got %v", field, err)
		}
	}
	for _, m := range []Message{
		{AgentID: "a", Conversation: conv, Approval: ans},
		{AgentID: "a", Conversation: conv, Images: []Image{{URL: "https://x.test/a.png"}}},
		{AgentID: "a", Text: "t", Conversation: conv, Images: []Image{{MediaType: "image/png", Data: "iVBORw0KGgo="}}},
	} {
		b, err := EncodePayload(m)
		if err != nil {
			t.Errorf("%+v: %v", m, err)
			continue
		}
		back, err := DecodePayload(b)
		if err != nil || len(back.Images) != len(m.Images) || (m.Approval != nil) != (back.Approval != nil) {
			t.Errorf("round trip %s: %+v %v", b, back, err)
		}
	}
}

// A worker refuses an Approvals.Timeout past MaxApprovalTimeout (the
// approval keys' TTL past a far expiry: approval's
// TestApprovalKeyTTLNeverNegative).
func TestApprovalTimeoutBounded(t *testing.T) {
	_, err := NewWorker(WorkerConfig{Redis: asynq.RedisClientOpt{Addr: "127.0.0.1:1"},
		Approvals: ApprovalRules{Timeout: MaxApprovalTimeout + time.Hour}})
	if err == nil || !strings.Contains(err.Error(), "Approvals.Timeout") {
		t.Errorf("NewWorker with Approvals.Timeout past the maximum: %v, want an error naming it", err)
	}
}
