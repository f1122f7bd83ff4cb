package lettasim

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Approvals (WIRE.md "Approvals"). A run whose script reaches an ApprovalRequest step emits an
// approval_request_message naming one or more tool calls and ends with stop reason
// requires_approval; its thread (the conversation, or the agent's default thread for
// "default" and for the agent endpoints) then waits. Until an approval message answers every
// call of that request, a user message to the thread is refused with 409 PENDING_APPROVAL and
// nothing is stored. The approval message is sent like a user message (same endpoints,
// streaming, background map and otid deduplication) and starts a run of its own, which
// streams the approval_response_message, a tool_return_message per call (the approved call's
// result, the client's own return, or status error carrying a denial's reason), and then the
// model's next steps: the rest of the script after an approval (possibly another approval
// request), or an answer about the denial.

// ToolCallInfo is one tool call of an approval request.
type ToolCallInfo struct {
	ID        string // tool_call_id
	Name      string
	Arguments string // JSON text
}

// ApprovalAnswer is one item of an approval message: a decision on a pending tool call
// ({"type":"approval"}), or the return of a client-side tool ({"type":"tool"}).
type ApprovalAnswer struct {
	ToolCallID string
	// Approve is the decision of an approval item; a tool return counts as approved.
	Approve bool
	// Reason is an approval item's optional explanation (a denial's is reported to the model).
	Reason string
	// ClientReturn marks a client tool return; Return and Status are its value and status
	// (success or error).
	ClientReturn   bool
	Return, Status string
}

// Pending is the approval request a thread waits on.
type Pending struct {
	RequestID string // the approval_request_message's id
	RunID     string // the run that asked
	Calls     []ToolCallInfo
	Since     time.Time
	// ConversationID is the waiting thread: "conv-…", or "default" for the agent's default
	// thread (which the agent endpoints share).
	ConversationID string
}

// pendingApproval is a thread's unanswered approval request and what the model does next.
type pendingApproval struct {
	Pending
	rest   Script // the steps after the ApprovalRequest (and the script's token and stop settings)
	echo   string // the user text "you said:" answers
	tokens bool
}

// legacyApproval is the deprecated single-call form: approve, approval_request_id, reason.
type legacyApproval struct {
	approve   bool
	requestID string
	reason    string
}

// approvalTurn is what an accepted approval message makes its run do: report each answered
// call, then run script.
type approvalTurn struct {
	calls   []ToolCallInfo
	answers []ApprovalAnswer // in the order of calls
	script  Script
	echo    string
	tokens  bool
}

// refusal is a send the thread's approval state refuses before anything is stored.
type refusal struct {
	status int
	detail string
}

func (rf *refusal) write(w http.ResponseWriter) { writeDetail(w, rf.status, rf.detail) }

const pendingApprovalDetail = "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call. " +
	"Please approve or deny the pending request before continuing."

// parseApprovalMessage reads an ApprovalCreate ({"type":"approval"}) or a ToolReturnCreate
// ({"type":"tool_return"}) item of a request's messages.
func parseApprovalMessage(raw json.RawMessage, typ, loc string) (inMessage, error) {
	var m struct {
		Otid              string          `json:"otid"`
		Approvals         json.RawMessage `json:"approvals"`
		ToolReturns       json.RawMessage `json:"tool_returns"`
		Approve           *bool           `json:"approve"`
		ApprovalRequestID *string         `json:"approval_request_id"`
		Reason            *string         `json:"reason"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return inMessage{}, fmt.Errorf("%s: %v", loc, err)
	}
	in := inMessage{typ: ptApprovalResponse, otid: m.Otid}
	if in.otid == "" {
		in.otid = newUUID()
	}
	items, field := m.Approvals, "approvals"
	if typ == "tool_return" {
		items, field = m.ToolReturns, "tool_returns"
		if isNull(items) {
			return in, fmt.Errorf("%s.tool_returns: Field required", loc)
		}
	}
	if isNull(items) {
		if m.Approve == nil {
			return in, fmt.Errorf("%s: approvals is required (or the deprecated approve with approval_request_id)", loc)
		}
		in.legacy = &legacyApproval{approve: *m.Approve}
		if m.ApprovalRequestID != nil {
			in.legacy.requestID = *m.ApprovalRequestID
		}
		if m.Reason != nil {
			in.legacy.reason = *m.Reason
		}
		return in, nil
	}
	var raws []json.RawMessage
	if err := json.Unmarshal(items, &raws); err != nil {
		return in, fmt.Errorf("%s.%s: %v", loc, field, err)
	}
	if len(raws) == 0 {
		return in, fmt.Errorf("%s.%s: at least one item is required", loc, field)
	}
	for i, r := range raws {
		a, err := parseAnswer(r, fmt.Sprintf("%s.%s[%d]", loc, field, i), typ == "tool_return")
		if err != nil {
			return in, err
		}
		in.answers = append(in.answers, a)
	}
	return in, nil
}

// parseAnswer reads an ApprovalReturn or a ToolReturn (onlyTool: a ToolReturnCreate's item).
func parseAnswer(raw json.RawMessage, loc string, onlyTool bool) (ApprovalAnswer, error) {
	var it struct {
		Type       *string         `json:"type"`
		ToolCallID *string         `json:"tool_call_id"`
		Approve    *bool           `json:"approve"`
		Reason     *string         `json:"reason"`
		ToolReturn json.RawMessage `json:"tool_return"`
		Status     *string         `json:"status"`
	}
	if err := json.Unmarshal(raw, &it); err != nil {
		return ApprovalAnswer{}, fmt.Errorf("%s: %v", loc, err)
	}
	typ := "tool"
	if !onlyTool {
		if it.Type == nil {
			return ApprovalAnswer{}, fmt.Errorf("%s.type: Field required (approval or tool)", loc)
		}
		typ = *it.Type
	}
	if it.ToolCallID == nil {
		return ApprovalAnswer{}, fmt.Errorf("%s.tool_call_id: Field required", loc)
	}
	a := ApprovalAnswer{ToolCallID: *it.ToolCallID}
	switch typ {
	case "approval":
		if it.Approve == nil {
			return a, fmt.Errorf("%s.approve: Field required", loc)
		}
		a.Approve = *it.Approve
		if it.Reason != nil {
			a.Reason = *it.Reason
		}
	case "tool":
		if isNull(it.ToolReturn) {
			return a, fmt.Errorf("%s.tool_return: Field required", loc)
		}
		if it.Status == nil || (*it.Status != "success" && *it.Status != "error") {
			return a, fmt.Errorf("%s.status: Input should be 'success' or 'error'", loc)
		}
		c, err := parseContent(it.ToolReturn, loc+".tool_return")
		if err != nil {
			return a, err
		}
		a.Approve, a.ClientReturn, a.Return, a.Status = true, true, c.text, *it.Status
	default:
		return a, fmt.Errorf("%s.type: %q is not approval or tool", loc, typ)
	}
	return a, nil
}

// pendingThread is the thread whose approval state a send to th (nil: the agent endpoints)
// meets: the agent endpoints share the default thread's.
func pendingThread(a *agent, th *thread) *thread {
	if th == nil {
		return a.def
	}
	return th
}

// checkApproval decides a send against its thread's approval state, before anything is
// stored: a user message while an approval is pending is refused (409); an approval message
// must answer exactly the pending calls (400 otherwise, or when nothing is pending) and then
// takes the pending request, whose continuation it returns.
func (s *Sim) checkApproval(p *sendPlan, th *thread) (*approvalTurn, *refusal) {
	a := p.a
	pt := pendingThread(a, th)
	var in *inMessage
	for i := range p.msgs {
		if p.msgs[i].typ == ptApprovalResponse {
			in = &p.msgs[i]
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	pend := pt.pending
	if in == nil {
		if pend != nil {
			return nil, &refusal{http.StatusConflict, pendingApprovalDetail}
		}
		return nil, nil
	}
	if pend == nil {
		return nil, &refusal{http.StatusBadRequest, "Cannot process approval response: No tool call is currently awaiting approval. " +
			"Please send a regular message to interact with the agent."}
	}
	answers := in.answers
	if in.legacy != nil {
		id := in.legacy.requestID
		if len(pend.Calls) == 1 && (id == pend.RequestID || id == pend.Calls[0].ID) {
			answers = []ApprovalAnswer{{ToolCallID: pend.Calls[0].ID, Approve: in.legacy.approve, Reason: in.legacy.reason}}
		} else {
			answers = []ApprovalAnswer{{ToolCallID: id}}
		}
		in.answers = answers
	}
	byID := make(map[string]ApprovalAnswer, len(answers))
	got := make([]string, 0, len(answers))
	for _, an := range answers {
		byID[an.ToolCallID] = an
		got = append(got, an.ToolCallID)
	}
	want := make([]string, 0, len(pend.Calls))
	ok := len(byID) == len(answers) && len(answers) == len(pend.Calls)
	for _, c := range pend.Calls {
		want = append(want, c.ID)
		if _, found := byID[c.ID]; !found {
			ok = false
		}
	}
	if !ok {
		return nil, &refusal{http.StatusBadRequest, "Invalid tool call IDs. Expected '" + pyList(want) +
			"', but received '" + pyList(got) + "'."}
	}
	pt.pending = nil
	at := &approvalTurn{calls: pend.Calls, echo: pend.echo, tokens: pend.tokens}
	var denied []string
	var reasons []string
	for _, c := range pend.Calls {
		an := byID[c.ID]
		at.answers = append(at.answers, an)
		if !an.Approve {
			denied = append(denied, c.Name)
			if an.Reason != "" {
				reasons = append(reasons, an.Reason)
			}
		}
	}
	switch {
	case len(denied) > 0:
		why := "the request was denied"
		if len(reasons) > 0 {
			why = "the request was denied: " + strings.Join(reasons, "; ")
		}
		names := strings.Join(denied, ", ")
		at.script = Script{Steps: []Step{
			{Kind: Reasoning, Text: "The user denied " + names + "."},
			{Kind: Assistant, Text: "I did not run " + names + ": " + why + "."},
		}, Tokens: pend.rest.Tokens, TokenDelay: pend.rest.TokenDelay}
	case len(pend.rest.Steps) == 0:
		names := make([]string, len(pend.Calls))
		for i, c := range pend.Calls {
			names[i] = c.Name
		}
		at.script = Script{Steps: []Step{
			{Kind: Reasoning, Text: "The tool ran."},
			{Kind: Assistant, Text: "Done: " + strings.Join(names, ", ") + " ran."},
		}, Tokens: pend.rest.Tokens, TokenDelay: pend.rest.TokenDelay, StopReason: pend.rest.StopReason}
	default:
		at.script = pend.rest
	}
	return at, nil
}

// pyList writes ids as Python prints a list of strings: ['a', 'b'].
func pyList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// setPending makes the turn's thread wait on the approval request row rw (a.mu not held), with
// rest the script's steps after the request.
func (t *turn) setPending(rw *row, p *part, rest []Step) {
	calls := p.calls
	pend := &pendingApproval{
		Pending: Pending{RequestID: rw.id, RunID: t.r.id, Calls: append([]ToolCallInfo(nil), calls...), Since: time.Now(),
			ConversationID: "default"},
		rest:   Script{Steps: append([]Step(nil), rest...), Tokens: t.script.Tokens, TokenDelay: t.script.TokenDelay, StopReason: t.script.StopReason},
		echo:   t.echo,
		tokens: t.tokens,
	}
	pt := pendingThread(t.a, t.r.th)
	if !pt.isDefault() {
		pend.ConversationID = pt.id
	}
	t.a.mu.Lock()
	pt.pending = pend
	t.a.mu.Unlock()
	s := t.s
	s.otidMu.Lock()
	close(s.pendSig)
	s.pendSig = make(chan struct{})
	s.otidMu.Unlock()
}

// approvalCalls sets the calls of an approval request part p: p's own call, or the step's
// Calls (parallel calls; p's tool_call is then the first of them).
func (t *turn) approvalCalls(p *part, calls []Call) {
	if len(calls) == 0 {
		p.calls = []ToolCallInfo{{ID: p.callID, Name: p.toolName, Arguments: p.args}}
		return
	}
	p.calls = make([]ToolCallInfo, 0, len(calls))
	for _, c := range calls {
		ci := ToolCallInfo{ID: newCallID(), Name: c.Name, Arguments: c.Arguments}
		if ci.Name == "" {
			ci.Name = "send_message"
		}
		if ci.Arguments == "" {
			ci.Arguments = string(appendObj1(nil, "query", t.echo))
		}
		p.calls = append(p.calls, ci)
	}
	p.toolName, p.args, p.callID = p.calls[0].Name, p.calls[0].Arguments, p.calls[0].ID
}

// deniedReturn is the tool return a denied call reports to the model.
func deniedReturn(reason string) string {
	if reason == "" {
		return "Error: request to call tool denied."
	}
	return "Error: request to call tool denied. User reason: " + reason
}

// emitAnswers streams the approval message and a tool return per answered call, before the
// continuation script. It reports false when the run was cancelled.
func (t *turn) emitAnswers() bool {
	at := t.approval
	if at == nil {
		return true
	}
	if t.cancelled() {
		return false
	}
	t.a.mu.RLock()
	in := t.r.rows[0]
	t.a.mu.RUnlock()
	t.r.push(false, t.frame(in, &in.parts[0], nil))
	for i, c := range at.calls {
		an := at.answers[i]
		p := part{typ: ptToolReturn, otid: newUUID(), toolName: c.Name, callID: c.ID, status: "success"}
		switch {
		case an.ClientReturn:
			p.text, p.status = an.Return, an.Status
		case an.Approve:
			p.text = string(appendObj1(nil, "result", "simulated result of "+c.Name))
		default:
			p.text, p.status = deniedReturn(an.Reason), "error"
		}
		r := &row{id: newID("message"), date: time.Now(), stepID: newID("step"), runID: t.r.id}
		r.parts = []part{p}
		t.emit(r, &r.parts[0])
		t.commit(r)
	}
	return true
}

// appendApprovals writes an approval message's answers (ApprovalReturn or ToolReturn items).
func appendApprovals(b []byte, answers []ApprovalAnswer) []byte {
	b = append(b, '[')
	for i, an := range answers {
		if i > 0 {
			b = append(b, ',')
		}
		o := beginObj(b)
		if an.ClientReturn {
			o.str("type", "tool")
			o.str("tool_return", an.Return)
			o.str("status", an.Status)
			o.str("tool_call_id", an.ToolCallID)
			o.null("stdout")
			o.null("stderr")
		} else {
			o.str("type", "approval")
			o.str("tool_call_id", an.ToolCallID)
			o.boolean("approve", an.Approve)
			o.strOrNull("reason", an.Reason)
		}
		b = o.end()
	}
	return append(b, ']')
}

// --- assertions ---

// PendingApproval returns the approval request a thread waits on: conversationID "conv-…", or
// "" / "default" for the agent's default thread (which the agent endpoints share).
func (s *Sim) PendingApproval(agentID, conversationID string) (Pending, bool) {
	a := s.getAgent(agentID)
	if a == nil {
		return Pending{}, false
	}
	th := a.def
	if conversationID != "" && conversationID != "default" {
		th = s.getConv(conversationID)
		if th == nil || th.a != a {
			return Pending{}, false
		}
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	if th.pending == nil {
		return Pending{}, false
	}
	p := th.pending.Pending
	p.Calls = append([]ToolCallInfo(nil), p.Calls...)
	return p, true
}

// PendingApprovals returns the approval requests the agent's threads wait on, its default
// thread's first, then its conversations' in creation order.
func (s *Sim) PendingApprovals(agentID string) []Pending {
	a := s.getAgent(agentID)
	if a == nil {
		return nil
	}
	s.mu.RLock()
	threads := []*thread{a.def}
	for _, th := range s.convOrder {
		if th.a == a {
			threads = append(threads, th)
		}
	}
	s.mu.RUnlock()
	a.mu.RLock()
	defer a.mu.RUnlock()
	var out []Pending
	for _, th := range threads {
		if th.pending != nil {
			p := th.pending.Pending
			p.Calls = append([]ToolCallInfo(nil), p.Calls...)
			out = append(out, p)
		}
	}
	return out
}

// WaitPendingApproval waits until the thread (as PendingApproval names it) waits on an
// approval request, and returns it.
func (s *Sim) WaitPendingApproval(ctx context.Context, agentID, conversationID string) (Pending, error) {
	for {
		s.otidMu.Lock()
		sig := s.pendSig
		s.otidMu.Unlock()
		if p, ok := s.PendingApproval(agentID, conversationID); ok {
			return p, nil
		}
		select {
		case <-sig:
		case <-ctx.Done():
			return Pending{}, ctx.Err()
		}
	}
}

// ApprovalMessages returns every approval message the agent accepted and stored, oldest
// first, from every thread (Received.Approvals holds the answers; Text is empty). A refused
// one (409, 400) is not stored and not listed.
func (s *Sim) ApprovalMessages(agentID string) []Received {
	a := s.getAgent(agentID)
	if a == nil {
		return nil
	}
	a.mu.RLock()
	defer a.mu.RUnlock()
	return append([]Received(nil), a.approvals...)
}

// SendAttempts returns how many send requests (of any agent, any endpoint) carried otid as
// their first message's otid and passed validation, whether they were then stored, replayed,
// or refused (a fault, 409 busy or pending approval, 400 for an approval that answers nothing).
// CountOtid counts what was stored; this counts what was sent: an approval a client sends
// twice is stored once (the second is refused or replayed) but counted here twice.
func (s *Sim) SendAttempts(otid string) int {
	s.mu.RLock()
	agents := append([]*agent(nil), s.agentOrder...)
	s.mu.RUnlock()
	n := 0
	for _, a := range agents {
		a.mu.RLock()
		n += a.attempts[otid]
		a.mu.RUnlock()
	}
	return n
}
