package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/approval"
	"github.com/lettaq/lettaq/queue/internal/inbound"
	"github.com/lettaq/lettaq/queue/record"
)

// Approvals (human in the loop; WIRE.md "Approvals"): a turn whose run stops with
// requires_approval records its request and writes one approval_required event; the answer
// is a turn of its own (Message.Approval), which Client.AnswerApproval enqueues at the front
// of the chat's line; an unanswered request is denied when it expires. How the requests are
// kept, answered and expired: queue/internal/approval. This file is the public side: the
// policy, the answer's types, the Client's answers and the answer's HTTP form; the worker's
// side is approvalpart.go.

// ApprovalPolicy says what a chat message does when it reaches the head of
// its line while an approval request of its chat is unanswered.
type ApprovalPolicy string

const (
	// ApprovalWait (the default): the message waits in its line until the
	// request is answered or expires.
	ApprovalWait ApprovalPolicy = "wait"
	// ApprovalDeny: lettaq denies the pending calls (the user moved on),
	// then the message is sent.
	ApprovalDeny ApprovalPolicy = "deny"
	// ApprovalError: the message fails at once with an error event.
	ApprovalError ApprovalPolicy = "error"
)

// UnmarshalText reads wait, deny or error, any case ("" is wait): for a
// policy given as text (an environment variable, a flag).
func (p *ApprovalPolicy) UnmarshalText(b []byte) error {
	switch v := ApprovalPolicy(strings.ToLower(strings.TrimSpace(string(b)))); v {
	case "":
		*p = ApprovalWait
	case ApprovalWait, ApprovalDeny, ApprovalError:
		*p = v
	default:
		return fmt.Errorf("approval policy %q: want wait, deny or error", b)
	}
	return nil
}

// defaultApprovalTimeout is how long an approval request waits for an
// answer before it is denied.
const defaultApprovalTimeout = 24 * time.Hour

// AnswerTaskID is the task id of the answer to the request of task
// requestTaskID: "answer:" and that id (hashed when long), so that the
// same answer sent twice is one task.
func AnswerTaskID(requestTaskID string) string { return approval.AnswerTaskID(requestTaskID) }

// newApprovals is the store of the approvals kept beside r's reply streams.
func newApprovals(r *Replies) *approval.Store {
	return approval.NewStore(r.rdb, r.keys(), r.opts.TTL)
}

// ApprovalReply is an answer to an approval request, for
// Client.AnswerApproval.
type ApprovalReply struct {
	// Request is the task id or the otid of the turn that asked.
	Request string
	// Approve and Reason answer every pending call when Decisions is
	// empty.
	Approve bool
	Reason  string
	// Decisions answer call by call; they must name every pending call.
	Decisions []record.ApprovalVerdict
	// SenderID and MessageID (the integration's id of the button press)
	// go to the journal. Optional.
	SenderID  string
	MessageID string
	// cause and processAt: set by the worker for expiries and policy
	// denials.
	cause     string
	processAt time.Time
}

// Approve answers every pending call of request (task id or otid) with yes.
func (c *Client) Approve(ctx context.Context, request, reason string) (EnqueueResult, error) {
	return c.AnswerApproval(ctx, ApprovalReply{Request: request, Approve: true, Reason: reason})
}

// Deny answers every pending call of request (task id or otid) with no;
// the reason is told to the model.
func (c *Client) Deny(ctx context.Context, request, reason string) (EnqueueResult, error) {
	return c.AnswerApproval(ctx, ApprovalReply{Request: request, Approve: false, Reason: reason})
}

// AnswerApproval enqueues the answer to an approval request as a turn of
// its own, at the front of its chat's line. An answer that leaves a pending
// call unanswered, or names a call that is not pending, is a
// *ValidationError naming the calls. A request already answered (the same
// button pressed twice, or an answer after the expiry) enqueues nothing:
// the result names the answer's task with Duplicate set. An unknown request
// is ErrNoApproval. Client needs ClientConfig.Replies (the request is kept
// under its prefix).
func (c *Client) AnswerApproval(ctx context.Context, r ApprovalReply) (EnqueueResult, error) {
	if c.cfg.Replies == nil {
		return EnqueueResult{}, errors.New("queue: AnswerApproval needs ClientConfig.Replies")
	}
	p, err := newApprovals(c.cfg.Replies).Get(ctx, r.Request)
	if err != nil {
		return EnqueueResult{}, err
	}
	id := p.NextAnswerTaskID()
	if p.AnsweredBy != "" {
		return EnqueueResult{TaskID: p.AnsweredBy, Duplicate: true, Queue: c.shards.queueOf(p.AnsweredBy), Otid: OtidFor(Message{}, p.AnsweredBy), Position: -1}, nil
	}
	decisions, err := decide(p, r)
	if err != nil {
		return EnqueueResult{}, err
	}
	cause := r.cause
	if cause == "" {
		cause = record.AnswerByUser
	}
	m := Message{AgentID: p.AgentID, Conversation: p.Conversation, LettaConversationID: p.LettaConversationID,
		SenderID: r.SenderID, MessageID: r.MessageID,
		Approval: &record.Answer{RequestTaskID: p.RequestTaskID, Decisions: decisions, Cause: cause}}
	queueName := p.Queue
	if queueName == "" {
		queueName = c.shards.queueOf(p.RequestTaskID)
	}
	return c.enqueueAnswer(ctx, m, id, queueName, r.processAt)
}

// decide turns r into one decision per pending call of p.
func decide(p *approval.Pending, r ApprovalReply) ([]record.ApprovalVerdict, error) {
	if len(r.Decisions) == 0 {
		out := make([]record.ApprovalVerdict, 0, len(p.Calls))
		for _, c := range p.Calls {
			out = append(out, record.ApprovalVerdict{ToolCallID: c.CallID, Approve: r.Approve, Reason: r.Reason})
		}
		return out, nil
	}
	pending := map[string]bool{}
	for _, c := range p.Calls {
		pending[c.CallID] = true
	}
	var unknown, missing []string
	given := map[string]bool{}
	for _, d := range r.Decisions {
		given[d.ToolCallID] = true
		if !pending[d.ToolCallID] {
			unknown = append(unknown, d.ToolCallID)
		}
	}
	for _, c := range p.Calls {
		if !given[c.CallID] {
			missing = append(missing, c.CallID)
		}
	}
	switch {
	case len(unknown) > 0:
		return nil, invalid("approval.decisions", "names tool calls that are not pending in request %s: %s", p.RequestTaskID, strings.Join(unknown, ", "))
	case len(missing) > 0:
		return nil, invalid("approval.decisions", "leaves the pending tool calls %s of request %s unanswered: all calls of the step are answered together",
			strings.Join(missing, ", "), p.RequestTaskID)
	}
	return slices.Clone(r.Decisions), nil
}

// enqueueAnswer enqueues m with task id id: at once and at the front of the
// line, or (processAt set: an expiry) scheduled, joining the line when it
// runs. An answer that finds the scheduled expiry in its place replaces it.
func (c *Client) enqueueAnswer(ctx context.Context, m Message, id, queueName string, processAt time.Time) (EnqueueResult, error) {
	if m.EnqueuedAt.IsZero() {
		m.EnqueuedAt = c.cfg.Now().UTC()
	}
	if !processAt.IsZero() && processAt.After(m.EnqueuedAt) {
		m.EnqueuedAt = processAt.UTC()
	}
	b, err := EncodePayload(m)
	if err != nil {
		return EnqueueResult{}, err
	}
	res := EnqueueResult{TaskID: id, Queue: queueName, Otid: OtidFor(m, id)}
	opts := append(c.TaskOptions(id), asynq.Queue(queueName))
	if !processAt.IsZero() {
		opts = append(opts, asynq.ProcessAt(processAt))
	}
	task := asynq.NewTask(TaskType, b)
	_, err = c.ac.EnqueueContext(ctx, task, opts...)
	if errors.Is(err, asynq.ErrTaskIDConflict) && processAt.IsZero() {
		// The expiry waits in the scheduled set: this answer comes first.
		if c.replaceScheduled(queueName, id) {
			_, err = c.ac.EnqueueContext(ctx, task, opts...)
		}
	}
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		res.Duplicate = true
		return res, nil
	case err != nil:
		return EnqueueResult{}, fmt.Errorf("queue: enqueue %s: %w", id, err)
	}
	if !processAt.IsZero() {
		return res, nil
	}
	if c.seq != nil {
		pos, err := c.seq.JoinFront(ctx, c.cfg.Ordering.Key(m), id)
		if err != nil {
			return res, fmt.Errorf("queue: enqueued %s but could not join its conversation's line: %w", id, err)
		}
		res.Position = pos
	}
	if c.cfg.Replies != nil {
		_, _ = c.cfg.Replies.EmitAcceptedOnce(ctx, m.Conversation, inbound.AnswerAccepted(m, id, res.Otid, max(res.Position, 0)))
	}
	return res, nil
}

// replaceScheduled deletes the task id of queue if it is the expiry and
// still scheduled (not run yet), and reports whether it did.
func (c *Client) replaceScheduled(queueName, id string) bool {
	insp := asynq.NewInspector(c.cfg.Redis)
	defer insp.Close()
	info, err := insp.GetTaskInfo(queueName, id)
	if err != nil || info.State != asynq.TaskStateScheduled {
		return false
	}
	if m, err := DecodePayload(info.Payload); err != nil || m.Approval == nil || m.Approval.Cause != record.AnswerExpired {
		return false // an answer waiting for its turn: the first answer stays
	}
	return insp.DeleteTask(queueName, id) == nil
}

// ApprovalConversation returns the chat of the approval request named by
// its task id or otid (whose reply stream carries the answer's events).
func (c *Client) ApprovalConversation(ctx context.Context, request string) (record.Conversation, error) {
	if c.cfg.Replies == nil {
		return record.Conversation{}, errors.New("queue: ApprovalConversation needs ClientConfig.Replies")
	}
	p, err := newApprovals(c.cfg.Replies).Get(ctx, request)
	if err != nil {
		return record.Conversation{}, err
	}
	return p.Conversation, nil
}
