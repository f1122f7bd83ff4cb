package queue

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/redis/go-redis/v9"
)

// Approvals (human in the loop; WIRE.md "Approvals").
//
// A turn whose run stops with requires_approval records a pendingApproval
// (every pending tool call, the run, the thread) under the turn's task id,
// writes one approval_required event carrying it, and schedules its expiry.
// At Letta the thread now refuses every new message until the calls are
// answered.
//
// The answer is a turn of its own (Message.Approval): Client.AnswerApproval
// checks that it answers every pending call, and enqueues it with the task
// id AnswerTaskID(request) — a second press of the same button is the same
// task — at the front of the conversation's line. An answer turn that gives
// up before its answer reached Letta leaves the request pending (answerable
// again, with a new expiry); the next answer's task id is
// AnswerTaskID's with the count of failed answers appended. Its otid is derived from
// that task id as for any turn; it sends Letta's approval message and then
// streams, continues and delivers like a message turn: the run may answer,
// or ask for another approval.
//
// Keys (prefix as the reply streams'):
//
//	<prefix>approval:req:<task_id>               the pendingApproval, JSON
//	<prefix>approval:otid:<otid>                 task id of the requesting turn
//	<prefix>approval:pending:<agent>:<scope>      task id of the thread's unanswered request
//
// The scope is the Letta thread a request blocks: the chat's own
// conversation ("chat:<integration>:<chat_id>", thread mode conversation),
// a conversation the payload names ("conv:<id>"), or the agent's default
// thread, which every chat of the agent shares ("agent", thread modes
// default and agent): a message of any chat of the agent then meets it.
//
// A message that reaches the head of its line while its chat has an
// unanswered request follows the ApprovalPolicy; an unanswered request is
// denied when it expires (WorkerConfig.ApprovalTimeout): the expiry is the
// answer turn itself, scheduled at that time with the reason, and replaced
// by an answer that comes first.

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

// ParseApprovalPolicy reads wait, deny or error ("" is wait).
func ParseApprovalPolicy(s string) (ApprovalPolicy, error) {
	switch p := ApprovalPolicy(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return ApprovalWait, nil
	case ApprovalWait, ApprovalDeny, ApprovalError:
		return p, nil
	}
	return "", fmt.Errorf("approval policy %q: want wait, deny or error", s)
}

// defaultApprovalTimeout is how long an approval request waits for an
// answer before it is denied.
const defaultApprovalTimeout = 24 * time.Hour

// Causes of an answer (Answer.Cause).
const (
	AnswerByUser    = "user"     // a person answered
	AnswerExpired   = "expired"  // nobody answered in time
	AnswerMovedOn   = "moved_on" // a new message came (policy deny)
	maxReasonBytes  = 1024
	maxAnswerTaskID = 200
)

// ApprovalVerdict answers one pending tool call: approve or deny (the
// payload's "decisions"; continuation.Result is something else).
type ApprovalVerdict struct {
	ToolCallID string `json:"tool_call_id"`
	Approve    bool   `json:"approve"`
	Reason     string `json:"reason,omitempty"`
}

// Answer is the payload of an approval answer turn ("approval"):
//
//	{"request_task_id": "turn:web:42:7", "cause": "user",
//	 "decisions": [{"tool_call_id": "call-1", "approve": false, "reason": "not today"}]}
type Answer struct {
	// RequestTaskID is the task id of the turn that asked.
	RequestTaskID string            `json:"request_task_id"`
	Decisions     []ApprovalVerdict `json:"decisions"`
	// Cause: AnswerByUser (default), AnswerExpired, AnswerMovedOn.
	Cause string `json:"cause,omitempty"`
}

func (a *Answer) validate(m Message) error {
	switch {
	case m.Text != "":
		return invalid("text", "must be empty in an approval answer")
	case len(m.Images) > 0:
		return invalid("images", "must be empty in an approval answer")
	case a.RequestTaskID == "":
		return invalid("approval.request_task_id", "must not be empty")
	case len(a.Decisions) == 0:
		return invalid("approval.decisions", "must answer at least one tool call")
	}
	if err := checkID("approval.request_task_id", a.RequestTaskID, true); err != nil {
		return err
	}
	seen := map[string]bool{}
	for i, d := range a.Decisions {
		f := fmt.Sprintf("approval.decisions[%d]", i)
		if err := checkID(f+".tool_call_id", d.ToolCallID, true); err != nil {
			return err
		}
		if seen[d.ToolCallID] {
			return invalid(f+".tool_call_id", "%q is answered twice", d.ToolCallID)
		}
		seen[d.ToolCallID] = true
		if len(d.Reason) > maxReasonBytes || !utf8.ValidString(d.Reason) {
			return invalid(f+".reason", "must be valid UTF-8 of at most %d bytes", maxReasonBytes)
		}
		if i := strings.IndexByte(d.Reason, 0); i >= 0 {
			return invalid(f+".reason", "holds a NUL character (U+0000) at byte %d: %s", i, nulReason)
		}
	}
	switch a.Cause {
	case "", AnswerByUser, AnswerExpired, AnswerMovedOn:
	default:
		return invalid("approval.cause", "%q: want user, expired or moved_on", a.Cause)
	}
	return nil
}

// summary is "approved", "denied" or "mixed".
func (a *Answer) summary() string {
	yes, no := 0, 0
	for _, d := range a.Decisions {
		if d.Approve {
			yes++
		} else {
			no++
		}
	}
	switch {
	case no == 0:
		return "approved"
	case yes == 0:
		return "denied"
	}
	return "mixed"
}

// pendingApproval is an approval request as lettaq keeps it.
type pendingApproval struct {
	RequestTaskID       string       `json:"request_task_id"`
	Otid                string       `json:"otid"`
	RunID               string       `json:"run_id,omitempty"`
	AgentID             string       `json:"agent_id"`
	Conversation        Conversation `json:"conversation"`
	LettaConversationID string       `json:"letta_conversation_id,omitempty"`
	Queue               string       `json:"queue,omitempty"`
	// Scope names the Letta thread the request blocks (see approvalScope):
	// "chat:<integration>:<chat>", "conv:<id>" or "agent".
	Scope string `json:"scope"`
	// Calls are every tool call waiting for an answer; all are answered in
	// one message.
	Calls       []ToolEvent `json:"calls"`
	RequestedAt time.Time   `json:"requested_at"`
	ExpiresAt   time.Time   `json:"expires_at,omitzero"`
	// AnsweredBy is the answer turn's task id once one ran; AnsweredAt,
	// Decision ("approved", "denied", "mixed") and Cause say how.
	AnsweredBy string    `json:"answered_by,omitempty"`
	AnsweredAt time.Time `json:"answered_at,omitzero"`
	Decision   string    `json:"decision,omitempty"`
	Cause      string    `json:"cause,omitempty"`
	// FailedAnswers are the answer turns that gave up before their answer
	// reached Letta (e.g. Letta down for every retry): the request stays
	// pending, and its next answer is a turn of its own (answerTaskID).
	FailedAnswers []string `json:"failed_answers,omitempty"`
}

// answerTaskID is the task id of the request's next answer (or of its
// expiry): AnswerTaskID of the request, or, after failed answers,
// answerTaskIDAfter.
func (p *pendingApproval) answerTaskID() string {
	return answerTaskIDAfter(p.RequestTaskID, len(p.FailedAnswers))
}

// AnswerTaskID is the task id of the answer to the request of task
// requestTaskID: "answer:" and that id (hashed when long), so that the
// same answer sent twice is one task.
func AnswerTaskID(requestTaskID string) string {
	id := "answer:" + requestTaskID
	if len(id) > maxAnswerTaskID {
		sum := sha256.Sum256([]byte(requestTaskID))
		return "answer:h:" + hex.EncodeToString(sum[:])
	}
	return id
}

// answerTaskIDAfter is the task id of the answer to the request of task
// requestTaskID after failed answer turns (pendingApproval.FailedAnswers):
// AnswerTaskID when failed is 0, else "answer#<failed+1>:" and the request's
// id (hashed when long). An AnswerTaskID never has '#' after "answer".
func answerTaskIDAfter(requestTaskID string, failed int) string {
	if failed <= 0 {
		return AnswerTaskID(requestTaskID)
	}
	pre := "answer#" + strconv.Itoa(failed+1) + ":"
	if id := pre + requestTaskID; len(id) <= maxAnswerTaskID {
		return id
	}
	sum := sha256.Sum256([]byte(requestTaskID))
	return pre + "h:" + hex.EncodeToString(sum[:])
}

// approvals keeps the pending approvals in Redis.
type approvals struct {
	rdb    redis.UniversalClient
	prefix string
	ttl    time.Duration
}

func newApprovals(r *Replies) *approvals {
	return &approvals{rdb: r.rdb, prefix: r.opts.Prefix, ttl: r.opts.TTL}
}

// store is the Redis side of the approvals.
func (a *approvals) store() store.Approvals {
	return store.Approvals{RDB: a.rdb, Keys: store.Keys{Prefix: a.prefix}}
}

// keyTTL is how long p's keys live: the replies' TTL past p's expiry (saturating at the
// largest Duration, never wrapping negative: a negative TTL is a key without expiry).
func (a *approvals) keyTTL(p *pendingApproval) time.Duration {
	ttl := a.ttl
	if !p.ExpiresAt.IsZero() {
		if until := time.Until(p.ExpiresAt); until > 0 {
			if ttl > math.MaxInt64-until {
				return math.MaxInt64
			}
			ttl += until
		}
	}
	return ttl
}

// save records p as its chat's unanswered request.
func (a *approvals) save(ctx context.Context, p *pendingApproval) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return a.store().Save(ctx, p.RequestTaskID, p.Otid, p.AgentID, p.Scope, b, a.keyTTL(p))
}

// get returns the request of task id or otid ref.
func (a *approvals) get(ctx context.Context, ref string) (*pendingApproval, error) {
	b, byOtid, err := a.store().Record(ctx, ref)
	switch {
	case errors.Is(err, store.ErrNoRequest) && byOtid:
		return nil, fmt.Errorf("%w with otid %q (expired)", ErrNoApproval, ref)
	case errors.Is(err, store.ErrNoRequest):
		return nil, fmt.Errorf("%w with task id or otid %q (unknown, or expired)", ErrNoApproval, ref)
	case err != nil:
		return nil, err
	}
	var p pendingApproval
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("approval request %s: %w", ref, err)
	}
	return &p, nil
}

// pendingFor returns the unanswered request of the thread scope names, or nil.
func (a *approvals) pendingFor(ctx context.Context, agentID, scope string) (*pendingApproval, error) {
	id, err := a.store().Pending(ctx, agentID, scope)
	return a.pendingOf(ctx, id, err)
}

// pendingOf is pendingFor once the pending key was read (id and err of its
// GET).
func (a *approvals) pendingOf(ctx context.Context, id string, err error) (*pendingApproval, error) {
	if errors.Is(err, redis.Nil) || (err == nil && id == "") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := a.get(ctx, id)
	if errors.Is(err, ErrNoApproval) {
		return nil, nil
	}
	if err != nil || p.AnsweredBy != "" {
		return nil, err
	}
	return p, nil
}

// answered records that answer task answerTaskID ended the request p (ans
// nil: its decision is not known).
func (a *approvals) answered(ctx context.Context, p *pendingApproval, answerTaskID string, ans *Answer, at time.Time) error {
	p.AnsweredBy, p.AnsweredAt = answerTaskID, at.UTC()
	if ans != nil {
		p.Decision, p.Cause = ans.summary(), ans.Cause
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return a.store().Answered(ctx, p.RequestTaskID, p.AgentID, p.Scope, b, a.ttl)
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
	Decisions []ApprovalVerdict
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
	ap := newApprovals(c.cfg.Replies)
	p, err := ap.get(ctx, r.Request)
	if err != nil {
		return EnqueueResult{}, err
	}
	id := p.answerTaskID()
	if p.AnsweredBy != "" {
		return EnqueueResult{TaskID: p.AnsweredBy, Duplicate: true, Queue: c.cfg.Queue, Otid: OtidFor(Message{}, p.AnsweredBy), Position: -1}, nil
	}
	decisions, err := decide(p, r)
	if err != nil {
		return EnqueueResult{}, err
	}
	cause := r.cause
	if cause == "" {
		cause = AnswerByUser
	}
	m := Message{AgentID: p.AgentID, Conversation: p.Conversation, LettaConversationID: p.LettaConversationID,
		SenderID: r.SenderID, MessageID: r.MessageID,
		Approval: &Answer{RequestTaskID: p.RequestTaskID, Decisions: decisions, Cause: cause}}
	queueName := p.Queue
	if queueName == "" {
		queueName = c.cfg.Queue
	}
	return c.enqueueAnswer(ctx, m, id, queueName, r.processAt)
}

// decide turns r into one decision per pending call of p.
func decide(p *pendingApproval, r ApprovalReply) ([]ApprovalVerdict, error) {
	if len(r.Decisions) == 0 {
		out := make([]ApprovalVerdict, 0, len(p.Calls))
		for _, c := range p.Calls {
			out = append(out, ApprovalVerdict{ToolCallID: c.CallID, Approve: r.Approve, Reason: r.Reason})
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
		_, _ = c.cfg.Replies.EmitAcceptedOnce(ctx, m.Conversation, answerAccepted(m, id, res.Otid, max(res.Position, 0)))
	}
	return res, nil
}

// answerAccepted is the accepted event of an answer turn: it says what was
// answered, and why.
func answerAccepted(m Message, id, otid string, pos int) ReplyEvent {
	a := m.Approval
	reason := ""
	if len(a.Decisions) > 0 {
		reason = a.Decisions[0].Reason
	}
	return ReplyEvent{TaskID: id, Otid: otid, MessageID: m.MessageID, Position: pos,
		Approval: &ApprovalEvent{RequestTaskID: a.RequestTaskID, Decision: a.summary(), Cause: a.Cause, Reason: reason}}
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
	if m, err := DecodePayload(info.Payload); err != nil || m.Approval == nil || m.Approval.Cause != AnswerExpired {
		return false // an answer waiting for its turn: the first answer stays
	}
	return insp.DeleteTask(queueName, id) == nil
}

// ApprovalConversation returns the chat of the approval request named by
// its task id or otid (whose reply stream carries the answer's events).
func (c *Client) ApprovalConversation(ctx context.Context, request string) (Conversation, error) {
	if c.cfg.Replies == nil {
		return Conversation{}, errors.New("queue: ApprovalConversation needs ClientConfig.Replies")
	}
	p, err := newApprovals(c.cfg.Replies).get(ctx, request)
	if err != nil {
		return Conversation{}, err
	}
	return p.Conversation, nil
}

// IsApprovalExpiry reports whether a task's payload is the scheduled expiry
// of an unanswered approval request (an answer turn with cause
// AnswerExpired): a pending approval, not a turn waiting for its line.
func IsApprovalExpiry(payload []byte) bool {
	m, err := DecodePayload(payload)
	return err == nil && m.Approval != nil && m.Approval.Cause == AnswerExpired
}
