package lettasim

import (
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

// listQuirks are the ListFault's misbehaviours of the message lists for agent a (and every
// agent): ignore the after cursor, list each page in reverse.
func (s *Sim) listQuirks(a *agent) (ignoreAfter, reverseOrder bool) {
	s.mu.Lock()
	ignoreAfter, reverseOrder = s.globalList.IgnoreAfter, s.globalList.ReverseOrder
	s.mu.Unlock()
	if a != nil {
		a.mu.RLock()
		ignoreAfter, reverseOrder = ignoreAfter || a.list.IgnoreAfter, reverseOrder || a.list.ReverseOrder
		a.mu.RUnlock()
	}
	return ignoreAfter, reverseOrder
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
	ignoreAfter, reverseOrder := s.listQuirks(a)
	if ignoreAfter {
		p.after = ""
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
	if reverseOrder {
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

func (s *Sim) handleHealth(w http.ResponseWriter, req *http.Request) {
	writeJSON(w, http.StatusOK, []byte(`{"version":"0.16.0-lettasim","status":"ok"}`))
}
