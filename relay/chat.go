package relay

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/lettaq/lettaq/internal/split"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/internal/store"
)

// turn is what a chat shows of one turn, rebuilt from its events: the
// desired state that sync makes the platform match.
type turn struct {
	task    string
	otid    string
	runID   string
	from    string // stream entry id of its first event
	lastSeq int64
	text    string             // the answer so far (answer_delta, not narration)
	tool    string             // the tool running now, "" when none
	final   *record.ReplyEvent // answer, approval_required or permanent error
	msgs    map[string]string  // slot → platform message id (durable)
	shown   map[string]string  // slot → text last put there by this process
	status  time.Time          // when typing/tool status was last shown
	seen    time.Time          // when this process last applied an event of it
	pressOK bool               // the approval's button mapping is stored
	// answers is the approval request this turn answers (its accepted
	// event's approval): its buttons come off when the turn is shown.
	answers  *record.ApprovalEvent
	answered bool // the request's buttons were taken off
}

// chat is one chat's state in this process.
type chat struct {
	conv    record.Conversation
	fence   store.Fence
	until   time.Time // the lease's end (real time)
	applied string    // last entry applied to memory
	cursor  string    // last entry durably advanced to
	turns   map[string]*turn
	order   []string          // task ids, first seen first
	opened  map[string]string // turns opened since the last Advance
	done    []string          // turns finished since the last Advance
	recent  []string          // recently finished task ids: their late events are ignored
	// saved are message ids found in Redis for turns not yet open in
	// memory (stored before the cursor passed the turn's first event): the
	// turn takes them when its events are applied again.
	saved    map[string]map[string]string
	lastEdit time.Time
	waitTill time.Time // a 429 asked to wait until then
	// pendingSince is the write time of the oldest event applied since the
	// last platform call: the lag metric's start.
	pendingSince time.Time
}

func newChat(c record.Conversation) *chat {
	return &chat{conv: c, turns: map[string]*turn{}, opened: map[string]string{}}
}

const recentTurns = 32

func (c *chat) finishedRecently(task string) bool {
	for _, t := range c.recent {
		if t == task {
			return true
		}
	}
	return false
}

// apply folds one event into memory; it calls nothing. An event of a turn
// with seq at or below the last applied is ignored (docs/reply-events.md).
func (c *chat) apply(ev record.ReplyEvent, now time.Time) {
	c.applied = ev.ID
	if ev.TaskID == "" || !ev.Type.Valid() || c.finishedRecently(ev.TaskID) {
		return // an event of a type this relay does not know is passed over (docs/reply-events.md)
	}
	t := c.turns[ev.TaskID]
	if t == nil {
		t = &turn{task: ev.TaskID, from: ev.ID, msgs: map[string]string{}, shown: map[string]string{}}
		for s, id := range c.saved[ev.TaskID] {
			t.msgs[s] = id
		}
		delete(c.saved, ev.TaskID)
		c.turns[ev.TaskID] = t
		c.order = append(c.order, ev.TaskID)
		c.opened[ev.TaskID] = ev.ID
	}
	t.seen = now
	if ev.Seq != 0 && ev.Seq <= t.lastSeq || t.final != nil {
		return
	}
	t.lastSeq = ev.Seq
	if ev.Otid != "" {
		t.otid = ev.Otid
	}
	if ev.RunID != "" {
		t.runID = ev.RunID
	}
	switch ev.Type {
	case record.EventAccepted:
		if ev.Approval != nil && ev.Approval.RequestTaskID != "" && ev.Approval.Decision != "" {
			a := *ev.Approval
			t.answers = &a
		}
	case record.EventAnswerDelta:
		if !ev.Narration {
			t.text += ev.Text
		}
	case record.EventTool:
		t.tool = ""
		if ev.Tool != nil && ev.Tool.Status == "call" {
			t.tool = ev.Tool.Name
		}
	case record.EventPhase:
		if ev.Phase != record.PhaseToolRunning {
			t.tool = ""
		}
	case record.EventAnswer, record.EventApprovalRequired, record.EventNotify:
		e := ev
		t.final = &e
	case record.EventError:
		if ev.Permanent {
			e := ev
			t.final = &e
		}
	}
}

// forget drops a finished turn from memory; Advance forgets it in Redis.
func (c *chat) forget(task string) {
	delete(c.turns, task)
	delete(c.opened, task)
	for i, t := range c.order {
		if t == task {
			c.order = append(c.order[:i], c.order[i+1:]...)
			break
		}
	}
	c.done = append(c.done, task)
	c.recent = append(c.recent, task)
	if len(c.recent) > recentTurns {
		c.recent = c.recent[1:]
	}
}

// view is what a turn should show: its message parts by slot, and whether the
// turn is over (then the relay clears the status and forgets the turn).
type view struct {
	parts   []string // slots "0", "1", …
	approve *Message // slot "a"
	over    bool
	silent  bool // answered by another turn (coalescing): shows nothing of its own
	// quiet: the turn never shows a status, so its end clears none (a
	// notify: another turn of the chat may be showing one).
	quiet bool
}

func (t *turn) view(limit int) view {
	f := t.final
	if f == nil {
		return view{parts: splitUnits(t.text, limit)}
	}
	switch f.Type {
	case record.EventAnswer:
		if f.AnsweredBy != "" && f.AnsweredBy != t.task {
			return view{over: true, silent: true}
		}
		parts := f.Parts
		if len(parts) == 0 {
			parts = splitUnits(f.Text, limit)
		}
		return view{parts: parts, over: true}
	case record.EventNotify:
		return view{parts: split.Message(f.Text, limit), over: true, quiet: true}
	case record.EventApprovalRequired:
		v := view{parts: splitUnits(t.text, limit), over: true}
		m := approvalMessage(f)
		v.approve = &m
		return v
	default: // permanent error
		return view{parts: splitUnits(errorText(t.text, f), limit), over: true}
	}
}

// errorText says in plain words how a turn ended that did not answer.
func errorText(streamed string, f *record.ReplyEvent) string {
	if f.StopReason == "cancelled" {
		said := f.Text
		if said == "" {
			said = streamed
		}
		if said == "" {
			return "⏹ Stopped."
		}
		return said + "\n\n⏹ Stopped."
	}
	msg := strings.TrimSpace(f.Text)
	if msg == "" {
		msg = "the agent could not answer"
	}
	if streamed != "" {
		return streamed + "\n\n⚠️ Sorry, this answer failed: " + msg
	}
	return "⚠️ Sorry, I could not answer: " + msg
}

// approvalMessage is the approval request with its buttons.
func approvalMessage(f *record.ReplyEvent) Message {
	var b strings.Builder
	b.WriteString("🔐 The agent asks to run:")
	if f.Approval != nil {
		for _, call := range f.Approval.Calls {
			fmt.Fprintf(&b, "\n• %s %s", call.Name, truncate(call.Arguments, 300))
		}
	} else if f.Tool != nil {
		fmt.Fprintf(&b, "\n• %s %s", f.Tool.Name, truncate(f.Tool.Arguments, 300))
	}
	short := pressShort(approvalRequest(f))
	return Message{Text: b.String(), Buttons: []Button{
		{Label: "Approve", Data: "ap:" + short + ":y"},
		{Label: "Deny", Data: "ap:" + short + ":n"},
	}}
}

func approvalRequest(f *record.ReplyEvent) string {
	if f.Approval != nil && f.Approval.RequestTaskID != "" {
		return f.Approval.RequestTaskID
	}
	return f.TaskID
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}

// splitUnits cuts text into parts of at most limit UTF-16 code units, at rune
// boundaries. It shows a growing answer; the final answer's parts are the
// worker's (docs/reply-events.md), which may cut elsewhere: the final sync edits
// each part's message to the worker's part.
func splitUnits(text string, limit int) []string {
	var parts []string
	for text != "" {
		units, end := 0, 0
		for end < len(text) {
			r, size := utf8.DecodeRuneInString(text[end:])
			u := 1
			if r > 0xffff {
				u = 2
			}
			if units+u > limit && end > 0 {
				break
			}
			units += u
			end += size
		}
		parts = append(parts, text[:end])
		text = text[end:]
	}
	return parts
}

// sortedSlots returns the numeric slots of msgs at or past n, for deletion.
func extraSlots(msgs map[string]string, n int) []string {
	var out []int
	for s := range msgs {
		if i, err := strconv.Atoi(s); err == nil && i >= n {
			out = append(out, i)
		}
	}
	sort.Ints(out)
	slots := make([]string, len(out))
	for i, v := range out {
		slots[i] = strconv.Itoa(v)
	}
	return slots
}

// entryBefore returns the stream id just before id, so that reading "after"
// it includes id.
func entryBefore(id string) string {
	ms, seq, ok := strings.Cut(id, "-")
	if !ok {
		return "0"
	}
	s, err := strconv.ParseUint(seq, 10, 64)
	if err != nil {
		return "0"
	}
	if s > 0 {
		return ms + "-" + strconv.FormatUint(s-1, 10)
	}
	m, err := strconv.ParseUint(ms, 10, 64)
	if err != nil || m == 0 {
		return "0"
	}
	return strconv.FormatUint(m-1, 10) + "-18446744073709551615"
}

// entryLE reports whether stream id a is at or before b.
func entryLE(a, b string) bool {
	am, as := splitID(a)
	bm, bs := splitID(b)
	return am < bm || am == bm && as <= bs
}

func splitID(id string) (uint64, uint64) {
	ms, seq, _ := strings.Cut(id, "-")
	m, _ := strconv.ParseUint(ms, 10, 64)
	s, _ := strconv.ParseUint(seq, 10, 64)
	return m, s
}
