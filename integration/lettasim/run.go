package lettasim

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"
)

// run is one agent turn. It executes in its own goroutine, independent of any HTTP request, and
// appends its SSE frames to log; streams (the original one, resumes) only read that log. So a
// client going away never stops a run: only cancel (or Close) does.
type run struct {
	id           string
	a            *agent
	background   bool
	async        bool
	otid         string
	created      time.Time
	resumeStatus int
	replayAll    bool    // Fault.IgnoreStartingAfter: resumes start from the run's first chunk
	th           *thread // the thread whose conversation endpoint started it; nil: agent endpoints
	maxChunks    int     // background runs keep at most ~this many chunks (0: all)

	cancelOnce sync.Once
	cancelCh   chan struct{}
	done       chan struct{}

	mu         sync.Mutex
	status     string
	stopReason string
	started    time.Time
	ended      time.Time
	ttft       time.Duration
	log        [][]byte // SSE frames; log[i] is the chunk with seq_id trimmed+i+1
	trimmed    int      // chunks dropped from the head of log (MaxStreamChunks)
	finished   bool
	notify     chan struct{} // closed when log grows or the run finishes, if waiting is set
	waiting    bool

	usage usage

	rows    []*row // the run's messages, the request's first; guarded by a.mu
	nInputs int    // how many of rows came with the request
}

type usage struct{ completion, prompt, total, steps int64 }

// appendUsage writes a usage_statistics object (seq < 0: no seq_id).
func appendUsage(b []byte, runID string, u usage, seq int64) []byte {
	o := beginObj(b)
	o.str("message_type", "usage_statistics")
	o.int("completion_tokens", u.completion)
	o.int("prompt_tokens", u.prompt)
	o.int("total_tokens", u.total)
	o.int("step_count", u.steps)
	o.key("run_ids")
	o.buf = append(appendString(append(o.buf, '['), runID), ']')
	o.null("cached_input_tokens")
	o.null("cache_write_tokens")
	o.null("reasoning_tokens")
	o.null("context_tokens")
	if seq >= 0 {
		o.int("seq_id", seq)
	}
	return o.end()
}

func newRun(a *agent, background, async bool, otid string) *run {
	return &run{
		id: newID("run"), a: a, background: background, async: async, otid: otid,
		created: time.Now(), status: "created",
		log:      make([][]byte, 0, 8), // an instant turn's frames, without regrowing
		cancelCh: make(chan struct{}), done: make(chan struct{}), notify: make(chan struct{}),
	}
}

func (r *run) requestCancel() { r.cancelOnce.Do(func() { close(r.cancelCh) }) }

func (r *run) active() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.finished
}

func (r *run) info() RunInfo {
	r.mu.Lock()
	defer r.mu.Unlock()
	return RunInfo{
		ID: r.id, AgentID: r.a.id, Otid: r.otid, Status: r.status, StopReason: r.stopReason,
		Background: r.background, Async: r.async, Created: r.created, Started: r.started,
		Ended: r.ended, TTFT: r.ttft, Chunks: r.trimmed + len(r.log), ConversationID: r.th.publicID(),
	}
}

// push appends frames to the log (and ends the run if final) and wakes the streams.
func (r *run) push(final bool, frames ...[]byte) {
	r.mu.Lock()
	r.log = append(r.log, frames...)
	if max := r.maxChunks; max > 0 && len(r.log) > max+max/4 {
		drop := len(r.log) - max
		r.log = append(make([][]byte, 0, max+max/4+1), r.log[drop:]...)
		r.trimmed += drop
	}
	if final {
		r.finished = true
	}
	var wake chan struct{}
	if r.waiting {
		wake = r.notify
		r.notify = make(chan struct{})
		r.waiting = false
	}
	r.mu.Unlock()
	if wake != nil {
		close(wake)
	}
}

// snapshot returns the frames from pos on (from the oldest chunk kept, start, when pos was
// trimmed), whether the run has finished (then the frames are all there is), and a channel
// closed when there is more.
func (r *run) snapshot(pos int) (frames [][]byte, start int, finished bool, more <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if pos < r.trimmed {
		pos = r.trimmed
	}
	start = pos
	if i := pos - r.trimmed; i < len(r.log) {
		frames = r.log[i:len(r.log):len(r.log)]
	}
	if r.finished {
		return frames, start, true, nil
	}
	r.waiting = true
	return frames, start, false, r.notify
}

// appendRunJSON writes a Run object, fields in schema order.
func (r *run) appendJSON(b []byte) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	o := beginObj(b)
	o.str("id", r.id)
	o.str("status", r.status)
	o.date("created_at", r.created)
	o.dateOrNull("completed_at", r.ended)
	o.str("agent_id", r.a.id)
	if r.th != nil && !r.th.isDefault() {
		o.str("conversation_id", r.th.id)
	} else {
		o.null("conversation_id")
	}
	o.null("base_template_id")
	o.boolean("background", r.background)
	o.null("metadata")
	o.null("request_config")
	o.strOrNull("stop_reason", r.stopReason)
	o.null("callback_url")
	o.null("callback_sent_at")
	o.null("callback_status_code")
	o.null("callback_error")
	if r.ttft > 0 {
		o.int("ttft_ns", int64(r.ttft))
	} else {
		o.null("ttft_ns")
	}
	if !r.ended.IsZero() {
		o.int("total_duration_ns", int64(r.ended.Sub(r.created)))
	} else {
		o.null("total_duration_ns")
	}
	return o.end()
}

// turn executes a run's script in the run's goroutine.
type turn struct {
	s        *Sim
	r        *run
	a        *agent
	script   Script
	tokens   bool
	maxSteps int
	fault    Fault
	echo     string
	approval *approvalTurn // an approval message's run: the answers to report first

	seq        int64 // seq_id of the last frame (background runs)
	pending    *row  // a model step whose reasoning is out but whose content is not yet
	modelSteps int
	callID     string
	callName   string
	callStep   string
	outTokens  int
}

func (t *turn) exec() {
	defer t.s.wg.Done()
	t.r.mu.Lock()
	t.r.status = "running"
	t.r.started = time.Now()
	t.r.mu.Unlock()
	stop, exception := t.steps()
	t.finish(stop, exception)
}

func (t *turn) cancelled() bool {
	select {
	case <-t.r.cancelCh:
		return true
	case <-t.s.closing:
		return true
	default:
		return false
	}
}

func (t *turn) wait(d time.Duration) bool {
	d = t.s.scaled(d)
	if d <= 0 {
		return !t.cancelled()
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-t.r.cancelCh:
		return false
	case <-t.s.closing:
		return false
	}
}

// steps runs the script and returns the stop reason.
func (t *turn) steps() (stop string, exception bool) {
	f := t.fault
	steps := t.script.Steps
	endAt := -1
	if f.EndWith != "" || f.UnhandledException {
		endAt = f.EndAfter
		if endAt < 0 || endAt > len(steps) {
			endAt = len(steps)
		}
	}
	endReason := func() (string, bool) {
		if f.UnhandledException {
			return "error", true
		}
		return f.EndWith, false
	}
	if !t.emitAnswers() {
		return "cancelled", false
	}
	for i, st := range steps {
		if i == endAt {
			return endReason()
		}
		if !t.wait(st.Delay) {
			return "cancelled", false
		}
		switch st.Kind {
		case Reasoning:
			t.commitPending()
			if t.modelSteps >= t.maxSteps {
				return "max_steps", false
			}
			t.pending = t.newModelRow()
			p := part{typ: ptReasoning, otid: newUUID(), text: st.Text}
			t.pending.parts = append(t.pending.parts, p)
			if !t.emit(t.pending, &t.pending.parts[len(t.pending.parts)-1]) {
				return "cancelled", false
			}
		case ToolCall, ApprovalRequest, Assistant:
			r := t.pending
			t.pending = nil
			if r == nil {
				if t.modelSteps >= t.maxSteps {
					return "max_steps", false
				}
				r = t.newModelRow()
			}
			p := part{otid: newUUID()}
			switch st.Kind {
			case Assistant:
				p.typ = ptAssistant
				p.text = st.Text
				if p.text == "" {
					p.text = "you said: " + t.echo
				}
			default:
				p.typ = ptToolCall
				if st.Kind == ApprovalRequest {
					p.typ = ptApprovalRequest
				}
				p.toolName = st.ToolName
				if p.toolName == "" {
					p.toolName = "send_message"
				}
				p.args = st.Arguments
				if p.args == "" {
					p.args = string(appendObj1(nil, "query", t.echo))
				}
				p.callID = newCallID()
				if st.Kind == ApprovalRequest {
					t.approvalCalls(&p, st.Calls)
				}
				t.callID, t.callName, t.callStep = p.callID, p.toolName, r.stepID
			}
			r.parts = append(r.parts, p)
			if !t.emit(r, &r.parts[len(r.parts)-1]) {
				t.commit(r)
				return "cancelled", false
			}
			t.commit(r)
			if st.Kind == ApprovalRequest {
				t.setPending(r, &r.parts[len(r.parts)-1], steps[i+1:])
				return "requires_approval", false
			}
		case ToolReturn:
			t.commitPending()
			p := part{typ: ptToolReturn, otid: newUUID(), text: st.Text, status: st.Status,
				toolName: st.ToolName, callID: t.callID}
			if p.status == "" {
				p.status = "success"
			}
			if p.toolName == "" {
				p.toolName = t.callName
			}
			if p.callID == "" {
				p.callID = newCallID()
			}
			if p.text == "" {
				p.text = string(appendObj1(nil, "result", "simulated result of "+p.toolName))
			}
			r := &row{id: newID("message"), date: time.Now(), stepID: t.callStep, runID: t.r.id}
			if r.stepID == "" {
				r.stepID = newID("step")
			}
			r.parts = []part{p}
			t.emit(r, &r.parts[0])
			t.commit(r)
		}
	}
	if endAt == len(steps) {
		return endReason()
	}
	if t.script.StopReason != "" {
		return t.script.StopReason, false
	}
	return "end_turn", false
}

// newCallID mints a tool call id in the shape model providers use (call_ and 24 hex digits).
func newCallID() string { return "call_" + strings.ReplaceAll(newUUID(), "-", "")[:24] }

func appendObj1(b []byte, k, v string) []byte {
	o := beginObj(b)
	o.str(k, v)
	return o.end()
}

func (t *turn) newModelRow() *row {
	t.modelSteps++
	return &row{id: newID("message"), date: time.Now(), stepID: newID("step"), runID: t.r.id}
}

func (t *turn) commitPending() {
	if t.pending != nil {
		t.commit(t.pending)
		t.pending = nil
	}
}

// commit stores a finished row in the agent's history (Letta persists a step's message when
// the step ends, so a poller never sees half a step).
func (t *turn) commit(r *row) {
	a := t.a
	a.mu.Lock()
	storeRow(a, t.r.th, r)
	r.runPos = len(t.r.rows)
	t.r.rows = append(t.r.rows, r)
	a.mu.Unlock()
}

func (t *turn) nextSeq() int64 {
	if !t.r.background {
		return -1
	}
	t.seq++
	return t.seq
}

// emit streams one part: one frame, or in token mode several delta frames sharing its id. It
// reports false when the run was cancelled while a paced text was going out.
func (t *turn) emit(r *row, p *part) bool {
	t.outTokens += countFields(p.text) + countFields(p.args)
	t.markFirstContent()
	var frames [][]byte
	if d := t.script.TokenDelay; t.tokens && d > 0 && (p.typ == ptReasoning || p.typ == ptAssistant) {
		words := splitChunks(p.text, countFields(p.text))
		for i, c := range words {
			if i > 0 && !t.wait(d) {
				return false
			}
			t.r.push(false, t.frame(r, p, &delta{text: c}))
		}
		return true
	}
	if t.tokens && p.typ != ptToolReturn {
		switch p.typ {
		case ptReasoning, ptAssistant:
			for _, c := range splitChunks(p.text, 8) {
				frames = append(frames, t.frame(r, p, &delta{text: c}))
			}
		case ptToolCall, ptApprovalRequest:
			calls := p.calls
			if len(calls) == 0 {
				calls = []ToolCallInfo{{ID: p.callID, Name: p.toolName, Arguments: p.args}}
			}
			for _, c := range calls {
				frames = append(frames, t.frame(r, p, &delta{name: c.Name, hasName: true, callID: c.ID}))
				for _, a := range splitChunks(c.Arguments, 3) {
					frames = append(frames, t.frame(r, p, &delta{args: a, hasArgs: true, callID: c.ID}))
				}
			}
		}
	} else {
		frames = append(frames, t.frame(r, p, nil))
	}
	t.r.push(false, frames...)
	return true
}

func (t *turn) frame(r *row, p *part, d *delta) []byte {
	b := make([]byte, 0, 512)
	b = append(b, "data: "...)
	b = appendPart(b, r, p, t.nextSeq(), d)
	return append(b, '\n', '\n')
}

func (t *turn) markFirstContent() {
	t.r.mu.Lock()
	if t.r.ttft == 0 {
		t.r.ttft = time.Since(t.r.created)
		if t.r.ttft <= 0 {
			t.r.ttft = 1
		}
	}
	t.r.mu.Unlock()
}

// countFields is len(strings.Fields(s)), without the slice.
func countFields(s string) int {
	n := 0
	inField := false
	for i := 0; i < len(s); {
		c := s[i]
		var space bool
		if c < utf8.RuneSelf {
			space = c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
			i++
		} else {
			r, size := utf8.DecodeRuneInString(s[i:])
			space = unicode.IsSpace(r)
			i += size
		}
		if !space && !inField {
			n++
		}
		inField = !space
	}
	return n
}

// splitChunks splits s into at most n pieces on word (or, for text without spaces, rune)
// boundaries. Joining the pieces gives s back. An empty s gives one empty piece.
func splitChunks(s string, n int) []string {
	if len(s) == 0 {
		return []string{""}
	}
	var cuts []int // candidate cut points
	for i := 1; i < len(s); i++ {
		if s[i-1] == ' ' && s[i] != ' ' {
			cuts = append(cuts, i)
		}
	}
	if len(cuts) == 0 {
		for i := 1; i < len(s); i++ {
			if utf8.RuneStart(s[i]) {
				cuts = append(cuts, i)
			}
		}
	}
	pieces := len(cuts) + 1
	if pieces > n {
		pieces = n
	}
	out := make([]string, 0, pieces)
	prev := 0
	for k := 1; k < pieces; k++ {
		c := cuts[k*len(cuts)/pieces]
		if c <= prev {
			continue
		}
		out = append(out, s[prev:c])
		prev = c
	}
	return append(out, s[prev:])
}

// finish ends the run: stores the last step, writes the terminal frames and the run status.
func (t *turn) finish(stop string, exception bool) {
	t.commitPending()
	r := t.r
	prompt := int64(1000 + countFields(t.echo))
	u := usage{completion: int64(t.outTokens), prompt: prompt, total: prompt + int64(t.outTokens), steps: int64(t.modelSteps)}
	var frames [][]byte
	switch {
	case exception:
		o := beginObj(nil)
		o.str("error", "simulated unhandled exception in run "+r.id)
		o.str("code", "INTERNAL_SERVER_ERROR")
		frames = append(frames, errorFrame(o.end()))
	case stop == "cancelled":
		// Letta writes this one as a literal, with spaces after the colons.
		t.nextSeq()
		frames = append(frames, []byte("data: {\"message_type\": \"stop_reason\", \"stop_reason\": \"cancelled\"}\n\n"))
		frames = append(frames, []byte("data: [DONE]\n\n"))
	case isFailure(stop):
		frames = append(frames, t.stopReasonFrame(stop))
		et := t.fault.ErrorType
		if et == "" {
			et = defaultErrorType(stop)
		}
		o := beginObj(nil)
		o.str("message_type", "error_message")
		o.str("run_id", r.id)
		o.str("error_type", et)
		o.str("message", "simulated "+stop+" ("+et+")")
		o.str("detail", "lettasim ended run "+r.id+" with stop reason "+stop)
		if seq := t.nextSeq(); seq >= 0 {
			o.int("seq_id", seq)
		}
		frames = append(frames, errorFrame(o.end()))
	default:
		frames = append(frames, t.stopReasonFrame(stop))
		b := append(make([]byte, 0, 384), "data: "...)
		frames = append(frames, append(appendUsage(b, r.id, u, t.nextSeq()), '\n', '\n'))
		frames = append(frames, doneFrame)
	}
	r.mu.Lock()
	r.stopReason = stop
	r.status = runStatusFor(stop, r.async)
	r.ended = time.Now()
	r.usage = u
	r.mu.Unlock()
	r.push(true, frames...)
	close(r.done)
	if r.th != nil {
		r.th.runEnded(r)
	}
	if t.s.cfg.Logf != nil { // the arguments would be boxed for nothing
		t.s.logf("lettasim: run %s of agent %s ended: %s", r.id, t.a.id, stop)
	}
}

// stopReasonFrame is the data frame of the run's stop_reason.
func (t *turn) stopReasonFrame(stop string) []byte {
	o := beginObj(append(make([]byte, 0, 96), "data: "...))
	o.str("message_type", "stop_reason")
	o.str("stop_reason", stop)
	if seq := t.nextSeq(); seq >= 0 {
		o.int("seq_id", seq)
	}
	return append(o.end(), '\n', '\n')
}

// doneFrame ends a stream. Frames are never written to once logged, so the runs share it.
var doneFrame = []byte("data: [DONE]\n\n")

func errorFrame(payload []byte) []byte {
	b := make([]byte, 0, len(payload)+24)
	b = append(b, "event: error\ndata: "...)
	b = append(b, payload...)
	return append(b, '\n', '\n')
}

// connFault is what a fault does to one streaming connection.
type connFault struct {
	firstByte       time.Duration // scaled
	stallOn         bool
	stallAfter      int
	stallFor        time.Duration // scaled, or Forever
	disconnectAfter int
}

func (s *Sim) connFaultOf(f Fault) connFault {
	return connFault{
		firstByte:       s.scaled(f.FirstByteDelay),
		stallOn:         f.StallFor != 0,
		stallAfter:      f.StallAfter,
		stallFor:        s.scaled(f.StallFor),
		disconnectAfter: f.DisconnectAfter,
	}
}

// streamRun writes the run's SSE stream from log position pos (= the seq_id to start after).
// It is the only goroutine per connected stream; pings come from a timer.
func (s *Sim) streamRun(w http.ResponseWriter, req *http.Request, r *run, pos int, pings bool, cf connFault) {
	ctx := req.Context()
	if cf.firstByte != 0 && !s.sleep(ctx, cf.firstByte) {
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	if !pings {
		_ = rc.Flush() // with pings, the headers go out with the first ping
	}

	events := 0
	stalled := false
	lastData := time.Now()
	// write sends one SSE event; false means stop serving.
	write := func(frame []byte) bool {
		if cf.stallOn && !stalled && events == cf.stallAfter {
			stalled = true
			_ = rc.Flush()
			if !s.sleep(ctx, cf.stallFor) {
				return false
			}
		}
		if _, err := w.Write(frame); err != nil {
			return false
		}
		events++
		if cf.disconnectAfter > 0 && events >= cf.disconnectAfter {
			_ = rc.Flush()
			panic(http.ErrAbortHandler) // the server closes the connection without ending the body
		}
		return true
	}
	lastSeq := int64(pos)
	ping := func() bool {
		b := make([]byte, 0, 200)
		b = append(b, "data: "...)
		o := beginObj(b)
		o.str("message_type", "ping")
		o.str("id", newID("ping"))
		o.date("date", time.Now())
		o.str("run_id", r.id)
		if r.background {
			o.int("seq_id", lastSeq)
		} else {
			o.null("seq_id")
		}
		b = append(o.end(), '\n', '\n')
		if !write(b) {
			return false
		}
		return rc.Flush() == nil
	}

	var timer *time.Timer
	var tick <-chan time.Time
	if pings {
		if !ping() {
			return
		}
		timer = time.NewTimer(s.cfg.PingInterval)
		defer timer.Stop()
		tick = timer.C
	}
	for {
		frames, start, finished, more := r.snapshot(pos)
		pos = start
		for _, fr := range frames {
			if !write(fr) {
				return
			}
			pos++
		}
		if len(frames) > 0 {
			lastSeq = int64(pos)
			lastData = time.Now()
			if rc.Flush() != nil {
				return
			}
			if timer != nil {
				timer.Reset(s.cfg.PingInterval)
			}
		}
		if finished {
			return
		}
		select {
		case <-more:
		case <-tick:
			if s.cfg.PingOnlyLimit > 0 && time.Since(lastData) >= s.cfg.PingOnlyLimit {
				return // Letta ends a ping-only stream after 1800s, without [DONE]
			}
			if !ping() {
				return
			}
			timer.Reset(s.cfg.PingInterval)
		case <-ctx.Done():
			return
		case <-s.closing:
			return
		}
	}
}

// waitDone waits for the run to end, the request to go away or the Sim to close.
func (s *Sim) waitDone(ctx context.Context, r *run) bool {
	select {
	case <-r.done:
		return true
	case <-ctx.Done():
		return false
	case <-s.closing:
		return false
	}
}
