package lettasim

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

type partType uint8

const (
	ptUser partType = iota + 1
	ptSystem
	ptReasoning
	ptToolCall
	ptToolReturn
	ptAssistant
	ptApprovalRequest
	ptApprovalResponse
)

var partTypeNames = [...]string{
	ptUser:             "user_message",
	ptSystem:           "system_message",
	ptReasoning:        "reasoning_message",
	ptToolCall:         "tool_call_message",
	ptToolReturn:       "tool_return_message",
	ptAssistant:        "assistant_message",
	ptApprovalRequest:  "approval_request_message",
	ptApprovalResponse: "approval_response_message",
}

func (t partType) String() string { return partTypeNames[t] }

// row is one stored message (a Letta Message row): one id, one or more LettaMessages ("parts")
// that share it. A model step's reasoning and its content (tool call or assistant text) are two
// parts of one row; a user message or a tool return is a row of its own. Pagination cursors
// are row ids, and a page never splits a row.
type row struct {
	id     string
	date   time.Time
	stepID string
	runID  string
	pos    int     // index in agent.history, or in conv.rows
	runPos int     // index in run.rows; -1 when the row belongs to no live run (seeded)
	conv   *thread // the conversation whose rows hold it; nil: the agent's history
	parts  []part

	// A seeded row (SeedHistory) stores only its batch and index; full() makes the rest.
	seed    *seedBatch
	seedIdx int
}

// seedBatch is one SeedHistory call. Its rows are virtual: ids, otids, run ids and texts are
// derived from the batch's random tags and the row's index when a page is encoded, so seeding
// 100,000 messages is two allocations, and a seeded id is found by parsing it, not by a map.
type seedBatch struct {
	msgTag, otidTag, runTag string // "xxxxxxxx-xxxx-4xxx-8xxx-": a uuid4 minus its last 12 digits
	start                   time.Time
	rows                    []row
}

func newSeedBatch(n int) *seedBatch {
	tag := func() string { return newUUID()[:24] }
	return &seedBatch{msgTag: tag(), otidTag: tag(), runTag: tag(),
		start: time.Now().Add(-time.Duration(n+1) * time.Second), rows: make([]row, n)}
}

func seedID(prefix, tag string, i int) string {
	h := strconv.FormatInt(int64(i), 16)
	return prefix + tag + strings.Repeat("0", 12-len(h)) + h
}

// find returns the row of a seeded message id, or nil.
func (b *seedBatch) find(id string) *row {
	rest, ok := strings.CutPrefix(id, "message-")
	if !ok {
		return nil
	}
	rest, ok = strings.CutPrefix(rest, b.msgTag)
	if !ok || len(rest) != 12 {
		return nil
	}
	i, err := strconv.ParseInt(rest, 16, 64)
	if err != nil || i < 0 || i >= int64(len(b.rows)) {
		return nil
	}
	return &b.rows[i]
}

// full returns the row with all its fields: r itself, or for a seeded row a materialised copy.
func (r *row) full() *row {
	b := r.seed
	if b == nil {
		return r
	}
	i := r.seedIdx
	m := &row{
		id:     seedID("message-", b.msgTag, i),
		date:   b.start.Add(time.Duration(i) * time.Second),
		runID:  seedID("run-", b.runTag, i/2),
		pos:    r.pos,
		runPos: -1,
	}
	p := part{otid: seedID("", b.otidTag, i)}
	if i%2 == 0 {
		p.typ = ptUser
		p.text = "seeded question " + strconv.Itoa(i/2)
	} else {
		p.typ = ptAssistant
		p.text = "seeded answer " + strconv.Itoa(i/2)
	}
	m.parts = []part{p}
	return m
}

type part struct {
	typ      partType
	otid     string
	senderID string
	text     string // content, reasoning or tool return
	asParts  bool   // user content was sent as a list of text parts
	toolName string
	args     string
	callID   string
	status   string // tool return: success | error

	calls   []ToolCallInfo    // an approval request's calls (the first is toolName, args, callID)
	answers []ApprovalAnswer  // an approval response's answers
	images  []json.RawMessage // a user message's image parts
}

// delta is the payload of one token-mode chunk.
type delta struct {
	text             string // reasoning or content delta
	name, args       string // tool call delta: empty keys are dropped
	hasName, hasArgs bool
	callID           string // the call a delta belongs to, when not the part's first
}

// appendPart appends one LettaMessage object. seq < 0 writes seq_id null. A non-nil d writes a
// token-mode delta instead of the whole payload.
func appendPart(b []byte, r *row, p *part, seq int64, d *delta) []byte {
	o := beginObj(b)
	o.str("id", r.id)
	o.date("date", r.date)
	if p.typ == ptToolReturn {
		o.strOrNull("name", p.toolName)
	} else {
		o.null("name")
	}
	o.str("message_type", p.typ.String())
	o.strOrNull("otid", p.otid)
	o.strOrNull("sender_id", p.senderID)
	o.strOrNull("step_id", r.stepID)
	o.null("is_err")
	o.intOrNull("seq_id", seq)
	o.strOrNull("run_id", r.runID)
	switch p.typ {
	case ptUser:
		o.key("content")
		if p.asParts {
			o.buf = append(o.buf, '[')
			if p.text != "" || len(p.images) == 0 {
				t := beginObj(o.buf)
				t.str("type", "text")
				t.str("text", p.text)
				t.null("signature")
				o.buf = t.end()
			}
			for i, img := range p.images {
				if i > 0 || p.text != "" {
					o.buf = append(o.buf, ',')
				}
				o.buf = append(o.buf, img...)
			}
			o.buf = append(o.buf, ']')
		} else {
			o.buf = appendString(o.buf, p.text)
		}
	case ptSystem:
		o.str("content", p.text)
	case ptReasoning:
		o.str("source", "non_reasoner_model")
		if d != nil {
			o.str("reasoning", d.text)
		} else {
			o.str("reasoning", p.text)
		}
		o.null("signature")
	case ptAssistant:
		if d != nil {
			o.str("content", d.text)
		} else {
			o.str("content", p.text)
		}
	case ptToolCall, ptApprovalRequest:
		if d != nil {
			o.key("tool_call")
			o.buf = appendToolCallDelta(o.buf, p, d)
			o.key("tool_calls")
			o.buf = appendToolCallDelta(o.buf, p, d)
		} else {
			o.key("tool_call")
			o.buf = appendToolCall(o.buf, p)
			o.key("tool_calls")
			o.buf = append(o.buf, '[')
			if len(p.calls) == 0 {
				o.buf = appendToolCall(o.buf, p)
			}
			for i, c := range p.calls {
				if i > 0 {
					o.buf = append(o.buf, ',')
				}
				t := beginObj(o.buf)
				t.str("name", c.Name)
				t.str("arguments", c.Arguments)
				t.str("tool_call_id", c.ID)
				o.buf = t.end()
			}
			o.buf = append(o.buf, ']')
		}
	case ptApprovalResponse:
		o.key("approvals")
		o.buf = appendApprovals(o.buf, p.answers)
		o.null("approve")
		o.null("approval_request_id")
		o.null("reason")
	case ptToolReturn:
		o.str("tool_return", p.text)
		o.str("status", p.status)
		o.str("tool_call_id", p.callID)
		o.null("stdout")
		o.null("stderr")
		o.key("tool_returns")
		o.buf = append(o.buf, '[')
		t := beginObj(o.buf)
		t.str("type", "tool")
		t.str("tool_return", p.text)
		t.str("status", p.status)
		t.str("tool_call_id", p.callID)
		t.null("stdout")
		t.null("stderr")
		o.buf = append(t.end(), ']')
	}
	return o.end()
}

func appendToolCall(b []byte, p *part) []byte {
	t := beginObj(b)
	t.str("name", p.toolName)
	t.str("arguments", p.args)
	t.str("tool_call_id", p.callID)
	return t.end()
}

// appendToolCallDelta writes a ToolCallDelta with null keys dropped:
// {"name":…,"tool_call_id":…} then {"arguments":…,"tool_call_id":…}.
func appendToolCallDelta(b []byte, p *part, d *delta) []byte {
	t := beginObj(b)
	if d.hasName {
		t.str("name", d.name)
	}
	if d.hasArgs {
		t.str("arguments", d.args)
	}
	if d.callID != "" {
		t.str("tool_call_id", d.callID)
	} else {
		t.str("tool_call_id", p.callID)
	}
	return t.end()
}

// appendRows appends the parts of rows as a JSON array of LettaMessages.
func appendRows(b []byte, rows []*row) []byte {
	b = append(b, '[')
	first := true
	for _, r := range rows {
		r = r.full()
		for i := range r.parts {
			if !first {
				b = append(b, ',')
			}
			first = false
			b = appendPart(b, r, &r.parts[i], -1, nil)
		}
	}
	return append(b, ']')
}

// page picks one page of items (a slice in oldest-first order) the way Letta's list
// endpoints do: cursors are positions ("after"/"before" in the requested sort order, -1 when
// absent); desc pages hold the newest rows first.
func page[T any](rows []T, afterPos, beforePos, limit int, desc bool) []T {
	n := len(rows)
	var out []T
	if !desc {
		lo, hi := 0, n
		if afterPos >= 0 {
			lo = afterPos + 1
		}
		if beforePos >= 0 {
			hi = beforePos
		}
		if lo >= hi {
			return nil
		}
		if hi-lo > limit {
			hi = lo + limit
		}
		out = make([]T, hi-lo)
		copy(out, rows[lo:hi])
		return out
	}
	// desc: "after X" means older than X, "before X" means newer than X.
	lo, hi := 0, n
	if afterPos >= 0 {
		hi = afterPos
	}
	if beforePos >= 0 {
		lo = beforePos + 1
	}
	if lo >= hi {
		return nil
	}
	if hi-lo > limit {
		lo = hi - limit
	}
	out = make([]T, 0, hi-lo)
	for i := hi - 1; i >= lo; i-- {
		out = append(out, rows[i])
	}
	return out
}

// Message is a stored message as History reports it (one per LettaMessage: a row with a
// reasoning and an assistant part gives two Messages sharing ID).
type Message struct {
	ID       string
	Type     string // message_type: user_message, reasoning_message, assistant_message, ...
	Date     time.Time
	Otid     string
	SenderID string
	StepID   string
	RunID    string
	// Text is the content, reasoning or tool return.
	Text                            string
	ToolName, Arguments, ToolCallID string
	Status                          string
	// ToolCalls are an approval request's calls; Approvals an approval response's answers;
	// Images the number of image parts of a user message.
	ToolCalls []ToolCallInfo
	Approvals []ApprovalAnswer
	Images    int
}

func (r *row) messages(out []Message) []Message {
	r = r.full()
	for i := range r.parts {
		p := &r.parts[i]
		out = append(out, Message{
			ID: r.id, Type: p.typ.String(), Date: r.date, Otid: p.otid, SenderID: p.senderID,
			StepID: r.stepID, RunID: r.runID, Text: p.text, ToolName: p.toolName,
			Arguments: p.args, ToolCallID: p.callID, Status: p.status,
			ToolCalls: append([]ToolCallInfo(nil), p.calls...), Approvals: append([]ApprovalAnswer(nil), p.answers...),
			Images: len(p.images),
		})
	}
	return out
}
