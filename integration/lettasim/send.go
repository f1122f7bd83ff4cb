package lettasim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// sendPlan is a validated send request: its messages, the fault that applies to this attempt
// and the script the turn runs. The agent endpoints and the conversation endpoints share it.
type sendPlan struct {
	a        *agent
	body     *sendBody
	mode     turnMode
	msgs     []inMessage
	otid     string // the first message's otid
	maxSteps int
	dir      directive
	f        Fault
	script   Script
	attempt  int
}

// busyForm is the form of this send's 409 busy answers: the fault's, else the directive's.
func (p *sendPlan) busyForm() string {
	if p.f.BusyForm != "" {
		return p.f.BusyForm
	}
	return p.dir.busyForm
}

// pings reports whether the response stream carries pings (include_pings, default true).
func (p *sendPlan) pings() bool { return p.body.IncludePings == nil || *p.body.IncludePings }

// background reports whether the run is resumable (background applies to streams only).
func (p *sendPlan) background() bool { return p.body.Background && p.mode == modeStream }

// planSend validates the body and picks the fault and the script. It answers the request itself
// (422) when it reports false.
func (s *Sim) planSend(w http.ResponseWriter, a *agent, body *sendBody, mode turnMode) (*sendPlan, bool) {
	msgs, err := parseMessages(body)
	if err == nil {
		err = s.fetchImages(msgs)
	}
	if err != nil {
		if br := (*badRequest)(nil); errors.As(err, &br) {
			writeDetail(w, http.StatusBadRequest, br.detail)
		} else {
			writeValidation(w, err.Error())
		}
		return nil, false
	}
	p := &sendPlan{a: a, body: body, mode: mode, msgs: msgs, otid: msgs[0].otid, maxSteps: 50}
	if body.MaxSteps != nil {
		if *body.MaxSteps < 1 {
			writeValidation(w, "max_steps must be at least 1", "body", "max_steps")
			return nil, false
		}
		p.maxSteps = *body.MaxSteps
	}
	var userTexts []string
	images := 0
	for _, m := range msgs {
		if m.typ == ptUser {
			userTexts = append(userTexts, m.text)
			images += len(m.images)
		}
	}
	p.dir, err = parseDirectives(strings.Join(userTexts, "\n"))
	if err != nil {
		writeDetail(w, http.StatusUnprocessableEntity, err.Error())
		return nil, false
	}
	switch images {
	case 0:
	case 1:
		p.dir.stripped += " (and 1 image)"
	default:
		p.dir.stripped += fmt.Sprintf(" (and %d images)", images)
	}

	// Which fault applies to this attempt.
	a.mu.Lock()
	a.attempts[p.otid]++
	p.attempt = a.attempts[p.otid]
	a.mu.Unlock()
	f, armed := a.takeFault()
	dir := &p.dir
	if !armed && dir.hasFault && (dir.times == 0 || p.attempt <= dir.times) {
		f, armed = dir.fault, true
		if dir.list != nil {
			a.mu.Lock()
			a.list = *dir.list
			a.mu.Unlock()
		}
	}
	if armed && !f.isZero() {
		s.logf("lettasim: agent %s otid %s attempt %d: %v", a.id, p.otid, p.attempt, f)
	}
	p.f = f
	switch {
	case dir.script != nil:
		p.script = *dir.script
	default:
		a.mu.RLock()
		sc := a.script
		a.mu.RUnlock()
		if sc != nil {
			p.script = *sc
		} else {
			p.script = s.cfg.DefaultScript
		}
	}
	return p, true
}

// admitSend plays the fault phases before anything is stored: AdmitDelay, 429, pending
// approval, busy (answered by busy: its body depends on the endpoint), 5xx. It reports false
// when it has answered (or the client went away).
func (s *Sim) admitSend(w http.ResponseWriter, req *http.Request, p *sendPlan, busy func()) bool {
	f := p.f
	if f.AdmitDelay != 0 && !s.sleep(req.Context(), s.scaled(f.AdmitDelay)) {
		return false
	}
	if f.Status429 || f.Status429Code != "" {
		s.write429(w, f)
		return false
	}
	if f.Deploy503 {
		s.setRetryAfter(w, f)
		o := beginObj(nil)
		o.str("errorCode", "cloud_api_shutting_down")
		o.str("message", "Letta Cloud is deploying: the request was not admitted, retry after the Retry-After delay")
		o.key("admitted")
		o.buf = append(o.buf, "false"...)
		o.key("retryable")
		o.buf = append(o.buf, "true"...)
		writeJSON(w, http.StatusServiceUnavailable, o.end())
		return false
	}
	if f.PendingApproval {
		writeDetail(w, http.StatusConflict, "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call. "+
			"Please approve or deny the pending request before continuing.")
		return false
	}
	if f.Busy {
		busy()
		return false
	}
	if f.Status5xxBeforeStore != 0 {
		writeDetail(w, statusCode5xx(f.Status5xxBeforeStore), "INTERNAL_SERVER_ERROR: simulated failure before the message was stored")
		return false
	}
	return true
}

// respondSend answers a send whose run has started (r nil: the Sim closed): the after-store
// faults, then the stream, the Run (async) or the LettaResponse (sync).
func (s *Sim) respondSend(w http.ResponseWriter, req *http.Request, p *sendPlan, r *run) {
	if r == nil {
		writeDetail(w, http.StatusServiceUnavailable, "lettasim is closed")
		return
	}
	f := p.f
	if f.BusyAfterStore {
		if r.th != nil {
			s.writeConvBusy(w, r.th, r.id, p.busyForm())
		} else {
			writeBusy(w, r.id)
		}
		return
	}
	if f.Status5xxAfterStore != 0 {
		writeDetail(w, statusCode5xx(f.Status5xxAfterStore), "INTERNAL_SERVER_ERROR: simulated failure after the message was stored")
		return
	}
	if f.DropBeforeResponse {
		panic(http.ErrAbortHandler)
	}
	ctx := req.Context()
	switch p.mode {
	case modeStream:
		s.streamRun(w, req, r, 0, p.pings(), s.connFaultOf(f))
	case modeAsync:
		if f.FirstByteDelay != 0 && !s.sleep(ctx, s.scaled(f.FirstByteDelay)) {
			return
		}
		writeJSON(w, http.StatusOK, r.appendJSON(nil))
	case modeSync:
		if f.FirstByteDelay != 0 && !s.sleep(ctx, s.scaled(f.FirstByteDelay)) {
			return
		}
		if !s.waitDone(ctx, r) {
			return
		}
		s.writeLettaResponse(w, r)
	}
}

// startTurn stores the messages (in the agent's own thread when th is nil or the agent's
// default thread, else in th), registers the run and starts its goroutine. nil if closed. It
// stores nothing and returns a refusal when the thread's approval state refuses the send
// (approvals.go).
func (s *Sim) startTurn(p *sendPlan, th *thread) (*run, *refusal) {
	a := p.a
	appr, ref := s.checkApproval(p, th)
	if ref != nil {
		return nil, ref
	}
	r := newRun(a, p.background(), p.mode == modeAsync, p.otid)
	r.resumeStatus = p.f.ResumeStatus
	r.replayAll = p.f.IgnoreStartingAfter
	r.th = th
	if r.background && s.maxChunks > 0 {
		r.maxChunks = s.maxChunks
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, nil
	}
	s.runs[r.id] = r
	s.runOrder = append(s.runOrder, r)
	s.wg.Add(1)
	s.mu.Unlock()

	now := time.Now()
	var recs []Received
	a.mu.Lock()
	for _, m := range p.msgs {
		rw := &row{id: newID("message"), date: now, runID: r.id, parts: []part{{
			typ: m.typ, otid: m.otid, senderID: m.senderID, text: m.text, asParts: m.asParts,
			images: m.images, answers: m.answers,
		}}}
		storeRow(a, th, rw)
		rw.runPos = len(r.rows)
		r.rows = append(r.rows, rw)
		switch m.typ {
		case ptUser:
			rec := Received{MessageID: rw.id, Otid: m.otid, Text: m.text, RunID: r.id, SenderID: m.senderID,
				At: now, ConversationID: th.publicID(), Images: len(m.images)}
			a.received = append(a.received, rec)
			if th != nil {
				th.received = append(th.received, rec)
			}
			recs = append(recs, rec)
		case ptApprovalResponse:
			rec := Received{MessageID: rw.id, Otid: m.otid, RunID: r.id, At: now, ConversationID: th.publicID(),
				Approvals: append([]ApprovalAnswer(nil), m.answers...)}
			a.approvals = append(a.approvals, rec)
			recs = append(recs, rec)
		}
	}
	r.nInputs = len(r.rows)
	a.runs = append(a.runs, r)
	if th != nil {
		th.runs = append(th.runs, r)
		th.lastMessageAt = now
	}
	a.mu.Unlock()

	if len(recs) > 0 {
		s.otidMu.Lock()
		for _, rec := range recs {
			s.otids[rec.Otid] = append(s.otids[rec.Otid], rec)
		}
		close(s.userSig)
		s.userSig = make(chan struct{})
		s.otidMu.Unlock()
	}

	t := &turn{s: s, r: r, a: a, script: p.script, tokens: p.script.Tokens || p.body.StreamTokens,
		maxSteps: p.maxSteps, fault: p.f, echo: p.dir.stripped}
	if appr != nil {
		t.approval, t.script, t.echo = appr, appr.script, appr.echo
		t.tokens = appr.tokens || appr.script.Tokens || p.body.StreamTokens
	}
	go t.exec()
	return r, nil
}

// storeRow appends a row to its thread (a.mu held): a conversation's own rows, or the agent's
// history (its default thread). Every row is found by id through a.index.
func storeRow(a *agent, th *thread, rw *row) {
	if th != nil && !th.isDefault() {
		rw.conv = th
		rw.pos = len(th.rows)
		th.rows = append(th.rows, rw)
	} else {
		rw.pos = len(a.history)
		a.history = append(a.history, rw)
	}
	a.index[rw.id] = rw
}

// writeLettaResponse answers a non-streaming send once its run has ended.
func (s *Sim) writeLettaResponse(w http.ResponseWriter, r *run) {
	r.mu.Lock()
	stop, status, usage := r.stopReason, r.status, r.usage
	r.mu.Unlock()
	if status == "failed" {
		writeDetail(w, http.StatusInternalServerError, "INTERNAL_SERVER_ERROR: run "+r.id+" failed with stop reason "+stop)
		return
	}
	a := r.a
	a.mu.RLock()
	rows := r.rows[r.nInputs:]
	o := beginObj(make([]byte, 0, 1024))
	o.key("messages")
	o.buf = appendRows(o.buf, rows)
	a.mu.RUnlock()
	o.key("stop_reason")
	sr := beginObj(o.buf)
	sr.str("message_type", "stop_reason")
	sr.str("stop_reason", stop)
	o.buf = sr.end()
	o.key("usage")
	o.buf = appendUsage(o.buf, r.id, usage, -1)
	o.null("logprobs")
	o.null("turns")
	writeJSON(w, http.StatusOK, o.end())
}

// setRetryAfter writes the fault's Retry-After (scaled, whole seconds rounded down, default 1s
// before scaling).
func (s *Sim) setRetryAfter(w http.ResponseWriter, f Fault) {
	ra := f.RetryAfter
	if ra <= 0 {
		ra = time.Second
	}
	w.Header().Set("Retry-After", strconv.FormatInt(int64(s.scaled(ra)/time.Second), 10))
}

// write429 answers the 429 the fault names (Status429Code, see Fault).
func (s *Sim) write429(w http.ResponseWriter, f Fault) {
	switch code := f.Status429Code; {
	case code == "" || code == "rate_limit":
		s.setRetryAfter(w, f)
		writeDetail(w, http.StatusTooManyRequests, "RATE_LIMIT_EXCEEDED: simulated rate limit, retry later")
	case code == "llm_rate_limit":
		o := beginObj(nil)
		o.key("error")
		e := beginObj(o.buf)
		e.str("type", "llm_rate_limit")
		e.str("message", "Rate limited by the model provider")
		e.str("detail", "simulated: the model provider answered 429")
		o.buf = e.end()
		writeJSON(w, http.StatusTooManyRequests, o.end())
	default:
		o := beginObj(nil)
		o.str("errorCode", code)
		o.str("detail", code+": simulated account limit")
		writeJSON(w, http.StatusTooManyRequests, o.end())
	}
}
