package lettasim

import (
	"bytes"
	"crypto/subtle"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
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
		s.conversationRoutes(mux, p)
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
	if !validPathID(w, "agent_id", id, agentIDPattern) {
		return nil
	}
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
	AgentID      *string         `json:"agent_id"` // conversation endpoints: the agent of "default"

	pre []preMessage // Messages, decoded by decodeSendBody's fast path (nil: not)
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
	if err := decodeSendBody(raw, &body); err != nil {
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
	p, ok := s.planSend(w, a, &body, mode)
	if !ok {
		return
	}
	busy := func() {
		id := a.lastRun()
		if id == "" {
			id = newID("run")
		}
		s.stats.conflicts.Add(1)
		writeBusy(w, id)
	}
	if !s.admitSend(w, req, p, busy) {
		return
	}
	var r *run
	var ref *refusal
	if s.cfg.OneRunPerAgent {
		a.sendMu.Lock()
		if id := a.activeRun(); id != "" {
			a.sendMu.Unlock()
			s.stats.conflicts.Add(1)
			writeBusy(w, id)
			return
		}
		r, ref = s.startTurn(p, nil)
		a.sendMu.Unlock()
	} else {
		r, ref = s.startTurn(p, nil)
	}
	if ref != nil {
		ref.write(w)
		return
	}
	s.respondSend(w, req, p, r)
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
	if a == nil {
		return
	}
	s.listThread(w, req, a, nil)
}

// listThread answers a message list of one thread: a conversation's rows, or (th nil or the
// default thread) the agent's history.
func (s *Sim) listThread(w http.ResponseWriter, req *http.Request, a *agent, th *thread) {
	if !s.applyListFault(w, req, a) {
		return
	}
	if th != nil && th.isDefault() {
		th = nil
	}
	p, ok := parseListParams(w, req.URL.Query(), 100, true)
	if !ok {
		return
	}
	a.mu.RLock()
	afterPos, beforePos, missing := cursorPositions(p, func(id string) (int, bool) {
		rw := a.lookup(id)
		if rw == nil || rw.conv != th {
			return 0, false
		}
		return rw.pos, true
	})
	if missing != "" {
		a.mu.RUnlock()
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Message with ID "+missing+" not found")
		return
	}
	all := a.history
	if th != nil {
		all = th.rows
	}
	rows := page(all, afterPos, beforePos, p.limit, p.desc)
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
	convFilter := q.Get("conversation_id")
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
		if convFilter != "" && in.ConversationID != convFilter {
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

// position reads starting_after (default 0) and include_pings (default true); a negative
// starting_after answers 422 and ok is false.
func (b retrieveStreamRequest) position(w http.ResponseWriter) (after int64, pings, ok bool) {
	if b.StartingAfter != nil {
		after = *b.StartingAfter
	}
	if after < 0 {
		writeValidation(w, "starting_after must be >= 0", "body", "starting_after")
		return 0, false, false
	}
	return after, b.IncludePings == nil || *b.IncludePings, true
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
	after, pings, ok := body.position(w)
	if !ok {
		return
	}
	s.resumeRun(w, req, r, after, pings)
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
	s.cancelRuns(w, req, targets, result)
}

// cancelRuns cancels targets, waits for each to end, and answers result with each of them
// "cancelled" (result may already hold "failed" entries).
func (s *Sim) cancelRuns(w http.ResponseWriter, req *http.Request, targets []*run, result map[string]string) {
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
