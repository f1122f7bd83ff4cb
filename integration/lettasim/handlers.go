package lettasim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

func (s *Sim) routes() {
	mux := http.NewServeMux()
	for _, p := range []string{"/v1", "/latest"} {
		s.handle(mux, "POST "+p+"/agents/{agent_id}/messages/stream", EndpointStream, true,
			func(w http.ResponseWriter, r *http.Request) { s.handleTurn(w, r, EndpointStream) })
		s.handle(mux, "POST "+p+"/agents/{agent_id}/messages", EndpointSend, true,
			func(w http.ResponseWriter, r *http.Request) { s.handleTurn(w, r, EndpointSend) })
		s.handle(mux, "POST "+p+"/agents/{agent_id}/messages/async", EndpointAsync, true,
			func(w http.ResponseWriter, r *http.Request) { s.handleTurn(w, r, EndpointAsync) })
		s.handle(mux, "POST "+p+"/agents/{agent_id}/messages/cancel", EndpointCancel, true, s.handleCancel)
		s.handle(mux, "GET "+p+"/agents/{agent_id}/messages", EndpointListMessages, true, s.handleListMessages)
		s.handle(mux, "GET "+p+"/agents/{agent_id}", EndpointAgent, true, s.handleGetAgent)
		s.handle(mux, "GET "+p+"/agents/{$}", EndpointAgent, true, s.handleListAgents)
		s.handle(mux, "GET "+p+"/agents", EndpointAgent, true, s.handleListAgents)
		s.handle(mux, "POST "+p+"/agents/{$}", EndpointAgent, true, s.handleCreateAgent)
		s.handle(mux, "POST "+p+"/agents", EndpointAgent, true, s.handleCreateAgent)
		s.handle(mux, "GET "+p+"/runs/{run_id}", EndpointGetRun, true, s.handleGetRun)
		s.handle(mux, "GET "+p+"/runs/{run_id}/messages", EndpointRunMessages, true, s.handleRunMessages)
		s.handle(mux, "POST "+p+"/runs/{run_id}/stream", EndpointResume, true, s.handleResume)
		s.handle(mux, "GET "+p+"/runs/{$}", EndpointListRuns, true, s.handleListRuns)
		s.handle(mux, "GET "+p+"/runs", EndpointListRuns, true, s.handleListRuns)
		s.handle(mux, "GET "+p+"/health/{$}", EndpointHealth, false, s.handleHealth)
		s.handle(mux, "GET "+p+"/health", EndpointHealth, false, s.handleHealth)
	}
	s.handle(mux, "/", EndpointOther, false, func(w http.ResponseWriter, r *http.Request) {
		writeDetail(w, http.StatusNotFound, "Not Found")
	})
	s.mux = mux
}

func (s *Sim) handle(mux *http.ServeMux, pattern string, ep Endpoint, auth bool, fn http.HandlerFunc) {
	c := &s.stats.eps[ep]
	mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		c.requests.Add(1)
		cw := &countingWriter{ResponseWriter: w, c: c}
		select {
		case <-s.closing:
			writeDetail(cw, http.StatusServiceUnavailable, "lettasim is closed")
			return
		default:
		}
		if auth && s.cfg.APIKey != "" {
			got := r.Header.Get("Authorization")
			if subtle.ConstantTimeCompare([]byte(got), []byte("Bearer "+s.cfg.APIKey)) != 1 {
				writeDetail(cw, http.StatusUnauthorized, "Unauthorized: missing or invalid API key")
				return
			}
		}
		fn(cw, r)
	})
}

// ServeHTTP serves the Letta REST API (under /v1/ and its alias /latest/).
func (s *Sim) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body)
}

func writeDetail(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, appendDetail(nil, msg))
}

func writeValidation(w http.ResponseWriter, msg string, loc ...string) {
	if len(loc) == 0 {
		loc = []string{"body"}
	}
	writeJSON(w, http.StatusUnprocessableEntity, appendValidation(nil, loc, msg))
}

func (s *Sim) agentOr404(w http.ResponseWriter, req *http.Request) *agent {
	id := req.PathValue("agent_id")
	a := s.agent(id)
	if a == nil {
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Agent with ID "+id+" not found")
	}
	return a
}

// --- sending a message ---

type sendBody struct {
	Messages     json.RawMessage `json:"messages"`
	Input        json.RawMessage `json:"input"`
	Streaming    *bool           `json:"streaming"`
	StreamTokens bool            `json:"stream_tokens"`
	IncludePings *bool           `json:"include_pings"`
	Background   bool            `json:"background"`
	MaxSteps     *int            `json:"max_steps"`
}

type messageCreate struct {
	Type     *string         `json:"type"`
	Role     string          `json:"role"`
	Content  json.RawMessage `json:"content"`
	Otid     string          `json:"otid"`
	SenderID string          `json:"sender_id"`
}

type inMessage struct {
	typ      partType
	text     string
	asParts  bool
	otid     string
	senderID string
}

func isNull(raw json.RawMessage) bool {
	t := bytes.TrimSpace(raw)
	return len(t) == 0 || bytes.Equal(t, []byte("null"))
}

// parseContent reads a string or a list of content parts (text parts are joined; image parts
// are accepted and ignored).
func parseContent(raw json.RawMessage) (string, bool, error) {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 {
		return "", false, errors.New("content is required")
	}
	switch t[0] {
	case '"':
		var s string
		err := json.Unmarshal(t, &s)
		return s, false, err
	case '[':
		var items []struct {
			Type string  `json:"type"`
			Text *string `json:"text"`
		}
		if err := json.Unmarshal(t, &items); err != nil {
			return "", false, err
		}
		var texts []string
		for i, it := range items {
			switch it.Type {
			case "text":
				if it.Text == nil {
					return "", false, fmt.Errorf("content[%d]: text is required", i)
				}
				texts = append(texts, *it.Text)
			case "image":
			default:
				return "", false, fmt.Errorf("content[%d]: unsupported content type %q", i, it.Type)
			}
		}
		return strings.Join(texts, "\n"), true, nil
	}
	return "", false, errors.New("content must be a string or a list of content parts")
}

func parseMessages(b *sendBody) ([]inMessage, error) {
	hasMsgs, hasInput := !isNull(b.Messages), !isNull(b.Input)
	if hasMsgs == hasInput {
		return nil, errors.New("Value error, exactly one of 'messages' or 'input' must be provided")
	}
	if hasInput {
		text, parts, err := parseContent(b.Input)
		if err != nil {
			return nil, fmt.Errorf("input: %v", err)
		}
		return []inMessage{{typ: ptUser, text: text, asParts: parts, otid: newUUID()}}, nil
	}
	var ms []messageCreate
	if err := json.Unmarshal(b.Messages, &ms); err != nil {
		return nil, fmt.Errorf("messages: %v", err)
	}
	if len(ms) == 0 {
		return nil, errors.New("messages: at least one message is required")
	}
	out := make([]inMessage, 0, len(ms))
	for i, m := range ms {
		if m.Type != nil && *m.Type != "message" {
			return nil, fmt.Errorf("messages[%d]: type %q is not supported by lettasim", i, *m.Type)
		}
		var typ partType
		switch m.Role {
		case "user":
			typ = ptUser
		case "system":
			typ = ptSystem
		case "assistant":
			typ = ptAssistant
		default:
			return nil, fmt.Errorf("messages[%d]: role must be user, system or assistant", i)
		}
		text, parts, err := parseContent(m.Content)
		if err != nil {
			return nil, fmt.Errorf("messages[%d]: %v", i, err)
		}
		if typ != ptUser {
			parts = false
		}
		otid := m.Otid
		if otid == "" {
			otid = newUUID()
		}
		out = append(out, inMessage{typ: typ, text: text, asParts: parts, otid: otid, senderID: m.SenderID})
	}
	return out, nil
}

// userAgentAllowed is Letta's check for POST /messages with streaming=true.
func userAgentAllowed(h http.Header) bool {
	if h.Get("X-Stainless-Package-Version") != "" {
		return true
	}
	ua := h.Values("User-Agent")
	if len(ua) == 0 || ua[0] == "" {
		return true
	}
	return strings.HasPrefix(strings.ToLower(ua[0]), "letta-client/1.")
}

type turnMode int

const (
	modeStream turnMode = iota
	modeSync
	modeAsync
)

func readBody(req *http.Request) ([]byte, error) {
	return io.ReadAll(io.LimitReader(req.Body, 16<<20))
}

func (s *Sim) handleTurn(w http.ResponseWriter, req *http.Request, ep Endpoint) {
	a := s.agentOr404(w, req)
	if a == nil {
		return
	}
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body sendBody
	if err := json.Unmarshal(raw, &body); err != nil {
		writeValidation(w, "JSON decode error: "+err.Error())
		return
	}
	mode := modeStream
	switch ep {
	case EndpointSend:
		if body.Streaming != nil && *body.Streaming {
			if !userAgentAllowed(req.Header) {
				writeDetail(w, http.StatusUnprocessableEntity, "streaming=true is only supported for SDK v1.0+ clients")
				return
			}
		} else {
			mode = modeSync
		}
	case EndpointAsync:
		mode = modeAsync
	}
	msgs, err := parseMessages(&body)
	if err != nil {
		writeValidation(w, err.Error())
		return
	}
	maxSteps := 50
	if body.MaxSteps != nil {
		if *body.MaxSteps < 1 {
			writeValidation(w, "max_steps must be at least 1", "body", "max_steps")
			return
		}
		maxSteps = *body.MaxSteps
	}
	var userTexts []string
	for _, m := range msgs {
		if m.typ == ptUser {
			userTexts = append(userTexts, m.text)
		}
	}
	dir, err := parseDirectives(strings.Join(userTexts, "\n"))
	if err != nil {
		writeDetail(w, http.StatusUnprocessableEntity, err.Error())
		return
	}

	// Which fault applies to this attempt.
	otid := msgs[0].otid
	a.mu.Lock()
	a.attempts[otid]++
	attempt := a.attempts[otid]
	a.mu.Unlock()
	f, armed := a.takeFault()
	if !armed && dir.hasFault && (dir.times == 0 || attempt <= dir.times) {
		f, armed = dir.fault, true
		if dir.list != nil {
			a.mu.Lock()
			a.list = *dir.list
			a.mu.Unlock()
		}
	}
	if armed && !f.isZero() {
		s.logf("lettasim: agent %s otid %s attempt %d: %v", a.id, otid, attempt, f)
	}
	var script Script
	switch {
	case dir.script != nil:
		script = *dir.script
	default:
		a.mu.RLock()
		sc := a.script
		a.mu.RUnlock()
		if sc != nil {
			script = *sc
		} else {
			script = s.cfg.DefaultScript
		}
	}

	ctx := req.Context()
	if f.AdmitDelay != 0 && !s.sleep(ctx, s.scaled(f.AdmitDelay)) {
		return
	}
	if f.Status429 {
		ra := f.RetryAfter
		if ra <= 0 {
			ra = time.Second
		}
		w.Header().Set("Retry-After", strconv.FormatInt(int64(s.scaled(ra)/time.Second), 10))
		writeDetail(w, http.StatusTooManyRequests, "RATE_LIMIT_EXCEEDED: simulated rate limit, retry later")
		return
	}
	if f.Busy {
		id := a.lastRun()
		if id == "" {
			id = newID("run")
		}
		writeBusy(w, id)
		return
	}
	if f.Status5xxBeforeStore != 0 {
		writeDetail(w, statusCode5xx(f.Status5xxBeforeStore), "INTERNAL_SERVER_ERROR: simulated failure before the message was stored")
		return
	}

	var r *run
	if s.cfg.OneRunPerAgent {
		a.sendMu.Lock()
		if id := a.activeRun(); id != "" {
			a.sendMu.Unlock()
			writeBusy(w, id)
			return
		}
		r = s.startTurn(a, msgs, mode, body.Background, f, script, script.Tokens || body.StreamTokens, maxSteps, dir.stripped)
		a.sendMu.Unlock()
	} else {
		r = s.startTurn(a, msgs, mode, body.Background, f, script, script.Tokens || body.StreamTokens, maxSteps, dir.stripped)
	}
	if r == nil {
		writeDetail(w, http.StatusServiceUnavailable, "lettasim is closed")
		return
	}
	if f.Status5xxAfterStore != 0 {
		writeDetail(w, statusCode5xx(f.Status5xxAfterStore), "INTERNAL_SERVER_ERROR: simulated failure after the message was stored")
		return
	}
	if f.DropBeforeResponse {
		panic(http.ErrAbortHandler)
	}
	switch mode {
	case modeStream:
		pings := body.IncludePings == nil || *body.IncludePings
		s.streamRun(w, req, r, 0, pings, s.connFaultOf(f))
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

// writeBusy answers 409 "conversation busy" with the run that holds the agent.
func writeBusy(w http.ResponseWriter, runID string) {
	o := beginObj(nil)
	o.key("detail")
	d := beginObj(o.buf)
	d.str("message", "CONVERSATION_BUSY: the agent is processing run "+runID+"; retry when it has finished")
	d.str("run_id", runID)
	o.buf = d.end()
	writeJSON(w, http.StatusConflict, o.end())
}

func statusCode5xx(n int) int {
	if n < 500 || n > 599 {
		return 500
	}
	return n
}

// startTurn stores the messages, registers the run and starts its goroutine. nil if closed.
func (s *Sim) startTurn(a *agent, msgs []inMessage, mode turnMode, background bool, f Fault,
	script Script, tokens bool, maxSteps int, echo string) *run {
	r := newRun(a, background && mode == modeStream, mode == modeAsync, msgs[0].otid)
	r.resumeStatus = f.ResumeStatus
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.runs[r.id] = r
	s.runOrder = append(s.runOrder, r)
	s.wg.Add(1)
	s.mu.Unlock()

	now := time.Now()
	var recs []Received
	a.mu.Lock()
	for _, m := range msgs {
		rw := &row{id: newID("message"), date: now, runID: r.id, parts: []part{{
			typ: m.typ, otid: m.otid, senderID: m.senderID, text: m.text, asParts: m.asParts,
		}}}
		rw.pos = len(a.history)
		a.history = append(a.history, rw)
		a.index[rw.id] = rw
		rw.runPos = len(r.rows)
		r.rows = append(r.rows, rw)
		if m.typ == ptUser {
			rec := Received{MessageID: rw.id, Otid: m.otid, Text: m.text, RunID: r.id, SenderID: m.senderID, At: now}
			a.received = append(a.received, rec)
			recs = append(recs, rec)
		}
	}
	r.nInputs = len(r.rows)
	a.runs = append(a.runs, r)
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

	t := &turn{s: s, r: r, a: a, script: script, tokens: tokens, maxSteps: maxSteps, fault: f, echo: echo}
	go t.exec()
	return r
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

// --- reading ---

type listParams struct {
	limit         int
	desc          bool
	after, before string
}

func parseListParams(w http.ResponseWriter, q url.Values, defLimit int, defDesc bool) (listParams, bool) {
	p := listParams{limit: defLimit, desc: defDesc}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			writeValidation(w, "limit must be a positive integer", "query", "limit")
			return p, false
		}
		p.limit = n
	}
	switch q.Get("order") {
	case "":
	case "asc":
		p.desc = false
	case "desc":
		p.desc = true
	default:
		writeValidation(w, "order must be 'asc' or 'desc'", "query", "order")
		return p, false
	}
	if q.Has("ascending") && q.Get("order") == "" {
		p.desc = q.Get("ascending") != "true"
	}
	p.after, p.before = q.Get("after"), q.Get("before")
	return p, true
}

// applyListFault delays or fails a read request per the agent's (and the Sim-wide) ListFault.
func (s *Sim) applyListFault(w http.ResponseWriter, req *http.Request, a *agent) bool {
	fail, status := false, 0
	s.mu.Lock()
	delay := s.globalList.Delay
	if s.globalList.Fail > 0 {
		s.globalList.Fail--
		fail, status = true, s.globalList.FailStatus
	}
	s.mu.Unlock()
	if a != nil {
		a.mu.Lock()
		delay += a.list.Delay
		if !fail && a.list.Fail > 0 {
			a.list.Fail--
			fail, status = true, a.list.FailStatus
		}
		a.mu.Unlock()
	}
	if delay > 0 && !s.sleep(req.Context(), s.scaled(delay)) {
		return false
	}
	if fail {
		if status == 0 {
			status = http.StatusServiceUnavailable
		}
		writeDetail(w, status, "SERVICE_UNAVAILABLE: simulated read failure")
		return false
	}
	return true
}

func (s *Sim) handleListMessages(w http.ResponseWriter, req *http.Request) {
	a := s.agentOr404(w, req)
	if a == nil || !s.applyListFault(w, req, a) {
		return
	}
	p, ok := parseListParams(w, req.URL.Query(), 100, true)
	if !ok {
		return
	}
	a.mu.RLock()
	afterPos, beforePos, missing := cursorPositions(p, func(id string) (int, bool) {
		rw := a.lookup(id)
		if rw == nil {
			return 0, false
		}
		return rw.pos, true
	})
	if missing != "" {
		a.mu.RUnlock()
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Message with ID "+missing+" not found")
		return
	}
	rows := page(a.history, afterPos, beforePos, p.limit, p.desc)
	if p.desc && s.cfg.DescPagesOldestFirst {
		reverse(rows)
	}
	b := appendRows(make([]byte, 0, 600*len(rows)+2), rows)
	a.mu.RUnlock()
	writeJSON(w, http.StatusOK, b)
}

// cursorPositions resolves the after/before message ids of a list request
// to positions (-1 when absent). missing names the first id that pos does
// not know: the request answers 404 then.
func cursorPositions(p listParams, pos func(id string) (int, bool)) (after, before int, missing string) {
	after, before = -1, -1
	for _, c := range []struct {
		id  string
		dst *int
	}{{p.after, &after}, {p.before, &before}} {
		if c.id == "" {
			continue
		}
		n, ok := pos(c.id)
		if !ok {
			return -1, -1, c.id
		}
		*c.dst = n
	}
	return after, before, ""
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

func (s *Sim) runOr404(w http.ResponseWriter, req *http.Request) *run {
	id := req.PathValue("run_id")
	r := s.getRun(id)
	if r == nil {
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Run with ID "+id+" not found")
	}
	return r
}

func (s *Sim) handleGetRun(w http.ResponseWriter, req *http.Request) {
	r := s.runOr404(w, req)
	if r == nil || !s.applyListFault(w, req, r.a) {
		return
	}
	writeJSON(w, http.StatusOK, r.appendJSON(nil))
}

func (s *Sim) handleRunMessages(w http.ResponseWriter, req *http.Request) {
	r := s.runOr404(w, req)
	if r == nil || !s.applyListFault(w, req, r.a) {
		return
	}
	p, ok := parseListParams(w, req.URL.Query(), 100, false)
	if !ok {
		return
	}
	a := r.a
	a.mu.RLock()
	afterPos, beforePos, missing := cursorPositions(p, func(id string) (int, bool) {
		rw := a.lookup(id)
		if rw == nil || rw.seed != nil || rw.runID != r.id || rw.runPos < 0 {
			return 0, false
		}
		return rw.runPos, true
	})
	if missing != "" {
		a.mu.RUnlock()
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Message with ID "+missing+" not found in run "+r.id)
		return
	}
	rows := page(r.rows, afterPos, beforePos, p.limit, p.desc)
	b := appendRows(make([]byte, 0, 600*len(rows)+2), rows)
	a.mu.RUnlock()
	writeJSON(w, http.StatusOK, b)
}

func (s *Sim) handleListRuns(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	var a *agent
	agentID := q.Get("agent_id")
	if agentID != "" {
		a = s.getAgent(agentID)
	}
	if !s.applyListFault(w, req, a) {
		return
	}
	p, ok := parseListParams(w, q, 100, true)
	if !ok {
		return
	}
	if p.limit > 1000 {
		writeValidation(w, "limit must be at most 1000", "query", "limit")
		return
	}
	statuses := map[string]bool{}
	for _, v := range q["statuses"] {
		for _, st := range strings.Split(v, ",") {
			if st = strings.TrimSpace(st); st != "" {
				statuses[st] = true
			}
		}
	}
	active := q.Get("active") == "true"
	bgFilter := q.Get("background")
	stopFilter := q.Get("stop_reason")

	var all []*run
	if agentID != "" {
		if a != nil {
			a.mu.RLock()
			all = append(all, a.runs...)
			a.mu.RUnlock()
		}
	} else {
		s.mu.RLock()
		all = append(all, s.runOrder...)
		s.mu.RUnlock()
	}
	type snap struct {
		r    *run
		info RunInfo
	}
	var sel []snap
	for _, r := range all {
		in := r.info()
		if len(statuses) > 0 && !statuses[in.Status] {
			continue
		}
		if active && in.Status != "created" && in.Status != "running" {
			continue
		}
		if bgFilter != "" && strconv.FormatBool(in.Background) != bgFilter {
			continue
		}
		if stopFilter != "" && in.StopReason != stopFilter {
			continue
		}
		sel = append(sel, snap{r, in})
	}
	afterPos, beforePos := -1, -1
	for _, c := range []struct {
		id  string
		pos *int
	}{{p.after, &afterPos}, {p.before, &beforePos}} {
		if c.id == "" {
			continue
		}
		*c.pos = -2
		for i, sn := range sel {
			if sn.r.id == c.id {
				*c.pos = i
			}
		}
		if *c.pos == -2 {
			writeDetail(w, http.StatusNotFound, "NOT_FOUND: Run with ID "+c.id+" not found")
			return
		}
	}
	pg := page(sel, afterPos, beforePos, p.limit, p.desc)
	b := []byte{'['}
	for i, sn := range pg {
		if i > 0 {
			b = append(b, ',')
		}
		b = sn.r.appendJSON(b)
	}
	writeJSON(w, http.StatusOK, append(b, ']'))
}

// --- resume and cancel ---

type retrieveStreamRequest struct {
	StartingAfter *int64 `json:"starting_after"`
	IncludePings  *bool  `json:"include_pings"`
}

func (s *Sim) handleResume(w http.ResponseWriter, req *http.Request) {
	r := s.runOr404(w, req)
	if r == nil {
		return
	}
	raw, err := readBody(req)
	if err != nil {
		return
	}
	if len(bytes.TrimSpace(raw)) == 0 {
		writeValidation(w, "Field required (send at least {})")
		return
	}
	var body retrieveStreamRequest
	if err := json.Unmarshal(raw, &body); err != nil {
		writeValidation(w, "JSON decode error: "+err.Error())
		return
	}
	var after int64
	if body.StartingAfter != nil {
		after = *body.StartingAfter
	}
	if after < 0 {
		writeValidation(w, "starting_after must be >= 0", "body", "starting_after")
		return
	}
	// A scripted refusal (Fault.ResumeStatus) answers exactly as a real one.
	st := r.resumeStatus
	switch {
	case st != 0:
	case !r.background:
		st = http.StatusBadRequest
	case time.Since(r.created) > s.cfg.ResumeMaxAge:
		st = http.StatusGone
	}
	switch st {
	case 0:
	case http.StatusGone:
		writeDetail(w, st, "Run "+r.id+" was created more than 3 hours ago, and is now expired.")
		return
	case http.StatusBadRequest:
		writeDetail(w, st, "Run "+r.id+" was not created in background mode, so it cannot be retrieved.")
		return
	default:
		writeDetail(w, st, "Background streaming requires Redis to be running.")
		return
	}
	pings := body.IncludePings == nil || *body.IncludePings
	pos := int(after)
	if int64(pos) != after {
		pos = int(^uint(0) >> 1)
	}
	s.streamRun(w, req, r, pos, pings, connFault{})
}

func (s *Sim) handleCancel(w http.ResponseWriter, req *http.Request) {
	a := s.agentOr404(w, req)
	if a == nil {
		return
	}
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body struct {
		RunIDs []string `json:"run_ids"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			writeValidation(w, "JSON decode error: "+err.Error())
			return
		}
	}
	result := map[string]string{}
	var targets []*run
	if body.RunIDs != nil {
		for _, id := range body.RunIDs {
			r := s.getRun(id)
			if r == nil || r.a != a || !r.active() {
				result[id] = "failed"
				continue
			}
			targets = append(targets, r)
		}
	} else {
		a.mu.RLock()
		for _, r := range a.runs {
			if r.active() {
				targets = append(targets, r)
			}
		}
		a.mu.RUnlock()
	}
	if len(targets) == 0 {
		writeDetail(w, http.StatusConflict, "CONFLICT: No active runs to cancel for agent "+a.id)
		return
	}
	for _, r := range targets {
		r.requestCancel()
	}
	for _, r := range targets {
		if !s.waitDone(req.Context(), r) {
			return
		}
		result[r.id] = "cancelled"
	}
	b, _ := json.Marshal(result)
	writeJSON(w, http.StatusOK, b)
}

// --- agents and health ---

func appendAgent(b []byte, a *agent) []byte {
	o := beginObj(b)
	o.date("created_at", a.created)
	o.str("id", a.id)
	o.str("name", a.name)
	o.str("system", "You are a simulated Letta agent (lettasim).")
	o.str("agent_type", "letta_v1_agent")
	o.raw("llm_config", `{"model":"lettasim","model_endpoint_type":"openai","context_window":128000}`)
	o.raw("memory", `{"blocks":[]}`)
	o.raw("blocks", "[]")
	o.raw("tools", "[]")
	o.raw("sources", "[]")
	o.raw("tags", "[]")
	return o.end()
}

func (s *Sim) handleGetAgent(w http.ResponseWriter, req *http.Request) {
	a := s.agentOr404(w, req)
	if a == nil {
		return
	}
	writeJSON(w, http.StatusOK, appendAgent(nil, a))
}

func (s *Sim) handleListAgents(w http.ResponseWriter, req *http.Request) {
	name := req.URL.Query().Get("name")
	s.mu.RLock()
	agents := append([]*agent(nil), s.agentOrder...)
	s.mu.RUnlock()
	b := []byte{'['}
	n := 0
	for _, a := range agents {
		if name != "" && a.name != name {
			continue
		}
		if n > 0 {
			b = append(b, ',')
		}
		n++
		b = appendAgent(b, a)
	}
	writeJSON(w, http.StatusOK, append(b, ']'))
}

func (s *Sim) handleCreateAgent(w http.ResponseWriter, req *http.Request) {
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body struct {
		Name string `json:"name"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			writeValidation(w, "JSON decode error: "+err.Error())
			return
		}
	}
	id := newID("agent")
	name := body.Name
	if name == "" {
		name = id
	}
	a := s.addAgent(id, name, nil)
	writeJSON(w, http.StatusOK, appendAgent(nil, a))
}

func (s *Sim) handleHealth(w http.ResponseWriter, req *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"version":"0.16.0-lettasim","status":"ok"}`))
}
