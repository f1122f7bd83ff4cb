package lettasim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"time"
)

// The conversation endpoints (WIRE.md "Conversations"): a conversation is a message thread of an
// agent with a lock (one run at a time) and, for background sends, an otid → run map that turns
// a resend into a replay of the run it duplicates. "default" (with agent_id) or an agent id is
// the agent's default thread, with the same lock.

func (s *Sim) conversationRoutes(mux *http.ServeMux, p string) {
	s.handle(mux, "POST "+p+"/conversations/{$}", EndpointConversations, true, s.handleCreateConversation)
	s.handle(mux, "POST "+p+"/conversations", EndpointConversations, true, s.handleCreateConversation)
	s.handle(mux, "GET "+p+"/conversations/{$}", EndpointConversations, true, s.handleListConversations)
	s.handle(mux, "GET "+p+"/conversations", EndpointConversations, true, s.handleListConversations)
	s.handle(mux, "GET "+p+"/conversations/{conversation_id}", EndpointConversations, true, s.handleGetConversation)
	s.handle(mux, "POST "+p+"/conversations/{conversation_id}/messages", EndpointConvSend, true, s.handleConvSend)
	s.handle(mux, "GET "+p+"/conversations/{conversation_id}/messages", EndpointConvMessages, true, s.handleConvMessages)
	s.handle(mux, "POST "+p+"/conversations/{conversation_id}/stream", EndpointConvResume, true, s.handleConvResume)
	s.handle(mux, "POST "+p+"/conversations/{conversation_id}/cancel", EndpointConvCancel, true, s.handleConvCancel)
}

// appendConversation writes a Conversation object (a.mu held for reading at least).
func appendConversation(b []byte, th *thread) []byte {
	o := beginObj(b)
	o.null("created_by_id")
	o.null("last_updated_by_id")
	o.date("created_at", th.created)
	if th.lastMessageAt.IsZero() {
		o.date("updated_at", th.created)
	} else {
		o.date("updated_at", th.lastMessageAt)
	}
	o.str("id", th.id)
	o.str("agent_id", th.a.id)
	o.strOrNull("summary", th.summary)
	o.raw("in_context_message_ids", "[]")
	o.raw("isolated_block_ids", "[]")
	o.null("model")
	o.null("model_settings")
	o.dateOrNull("last_message_at", th.lastMessageAt)
	return o.end()
}

func (s *Sim) conversationJSON(th *thread) []byte {
	th.a.mu.RLock()
	defer th.a.mu.RUnlock()
	return appendConversation(nil, th)
}

// agentByID resolves an agent id given outside the path (query or body): 422 if malformed, 404
// if unknown.
func (s *Sim) agentByID(w http.ResponseWriter, id string, loc ...string) *agent {
	if !ValidAgentID(id) {
		writeValidationTyped(w, "string_pattern_mismatch", "String should match pattern '"+agentIDPattern+"'", loc...)
		return nil
	}
	a := s.agent(id)
	if a == nil {
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Agent with ID "+id+" not found")
	}
	return a
}

// threadOf resolves the conversation_id path parameter: "conv-…", "default" with agentID (from
// the query or the body, named by loc), or an agent id. It answers 422/404 itself when it
// returns nil.
func (s *Sim) threadOf(w http.ResponseWriter, req *http.Request, agentID string, loc ...string) *thread {
	id := req.PathValue("conversation_id")
	if !validPathID(w, "conversation_id", id, threadIDPattern) {
		return nil
	}
	switch {
	case id == "default":
		if agentID == "" {
			writeValidationTyped(w, "missing", "agent_id is required when conversation_id is 'default'", loc...)
			return nil
		}
		if a := s.agentByID(w, agentID, loc...); a != nil {
			return a.def
		}
		return nil
	case strings.HasPrefix(id, "agent-"):
		if a := s.agentByID(w, id, "path", "conversation_id"); a != nil {
			return a.def
		}
		return nil
	}
	th := s.getConv(id)
	if th == nil {
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Conversation with ID "+id+" not found")
	}
	return th
}

func (s *Sim) handleCreateConversation(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	if !q.Has("agent_id") {
		writeValidationTyped(w, "missing", "Field required", "query", "agent_id")
		return
	}
	a := s.agentByID(w, q.Get("agent_id"), "query", "agent_id")
	if a == nil {
		return
	}
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body struct {
		Summary *string `json:"summary"`
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			writeValidation(w, "JSON decode error: "+err.Error())
			return
		}
	}
	summary := ""
	if body.Summary != nil {
		summary = *body.Summary
	}
	th := s.newConversation(a, summary)
	writeJSON(w, http.StatusOK, s.conversationJSON(th))
}

func (s *Sim) handleGetConversation(w http.ResponseWriter, req *http.Request) {
	id := req.PathValue("conversation_id")
	if !validPathID(w, "conversation_id", id, convIDPattern) {
		return
	}
	th := s.getConv(id)
	if th == nil {
		writeDetail(w, http.StatusNotFound, "NOT_FOUND: Conversation with ID "+id+" not found")
		return
	}
	writeJSON(w, http.StatusOK, s.conversationJSON(th))
}

// handleListConversations: agent_id (optional), limit (50), after (a conversation id), order
// (desc), order_by (created_at, last_message_at; last_run_completion sorts as last_message_at),
// summary_search (a case-insensitive substring of the summary).
func (s *Sim) handleListConversations(w http.ResponseWriter, req *http.Request) {
	q := req.URL.Query()
	var a *agent
	if id := q.Get("agent_id"); id != "" {
		if a = s.agentByID(w, id, "query", "agent_id"); a == nil {
			return
		}
	}
	p, ok := parseListParams(w, q, 50, true)
	if !ok {
		return
	}
	byMessage := false
	switch q.Get("order_by") {
	case "", "created_at":
	case "last_message_at", "last_run_completion":
		byMessage = true
	default:
		writeValidation(w, "order_by must be 'created_at', 'last_run_completion' or 'last_message_at'", "query", "order_by")
		return
	}
	search := strings.ToLower(q.Get("summary_search"))
	s.mu.RLock()
	all := append([]*thread(nil), s.convOrder...)
	s.mu.RUnlock()
	type snap struct {
		th   *thread
		json []byte
		at   time.Time
	}
	var sel []snap
	for _, th := range all {
		if a != nil && th.a != a {
			continue
		}
		if search != "" && !strings.Contains(strings.ToLower(th.summary), search) {
			continue
		}
		th.a.mu.RLock()
		sn := snap{th: th, json: appendConversation(nil, th), at: th.created}
		if byMessage {
			sn.at = th.lastMessageAt
		}
		th.a.mu.RUnlock()
		sel = append(sel, sn)
	}
	if byMessage {
		sort.SliceStable(sel, func(i, j int) bool { return sel[i].at.Before(sel[j].at) })
	}
	afterPos := -1
	if p.after != "" {
		afterPos = -2
		for i, sn := range sel {
			if sn.th.id == p.after {
				afterPos = i
			}
		}
		if afterPos == -2 {
			writeDetail(w, http.StatusNotFound, "NOT_FOUND: Conversation with ID "+p.after+" not found")
			return
		}
	}
	b := []byte{'['}
	for i, sn := range page(sel, afterPos, -1, p.limit, p.desc) {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, sn.json...)
	}
	writeJSON(w, http.StatusOK, append(b, ']'))
}

// handleConvSend: POST /v1/conversations/{conversation_id}/messages.
func (s *Sim) handleConvSend(w http.ResponseWriter, req *http.Request) {
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body sendBody
	if err := decodeSendBody(raw, &body); err != nil {
		writeValidation(w, "JSON decode error: "+err.Error())
		return
	}
	agentID := ""
	if body.AgentID != nil {
		agentID = *body.AgentID
	}
	th := s.threadOf(w, req, agentID, "body", "agent_id")
	if th == nil {
		return
	}
	mode := modeStream
	if body.Streaming != nil && !*body.Streaming {
		mode = modeSync
	}
	p, ok := s.planSend(w, th.a, &body, mode)
	if !ok {
		return
	}
	busy := func() {
		id := th.a.lastRun()
		if id == "" {
			id = newID("run")
		}
		s.writeConvBusy(w, th, id, p.busyForm())
	}
	if !s.admitSend(w, req, p, busy) {
		return
	}
	res := s.acquire(req.Context().Done(), th, p)
	switch {
	case res.gone:
		if res.run == nil && req.Context().Err() == nil {
			writeDetail(w, http.StatusServiceUnavailable, "lettasim is closed")
		}
	case res.refused != nil:
		res.refused.write(w)
	case res.busy != "":
		s.writeConvBusy(w, th, res.busy, p.busyForm())
	case res.replay:
		s.logf("lettasim: %s otid %s: replaying run %s", th.name(), p.otid, res.run.id)
		s.respondSend(w, req, p, res.run)
	default:
		s.respondSend(w, req, p, res.run)
	}
}

// writeConvBusy answers 409 for a send to a locked thread, in the server's form or (HostedBusy,
// or the send's busy_form directive) the hosted service's.
func (s *Sim) writeConvBusy(w http.ResponseWriter, th *thread, runID, form string) {
	s.stats.conflicts.Add(1)
	hosted := s.cfg.HostedBusy
	switch form {
	case "hosted":
		hosted = true
	case "detail":
		hosted = false
	}
	o := beginObj(nil)
	switch {
	case form == "newer":
		o.str("error", "Conversation is busy with another active run.")
	case form == "nested":
		o.key("error")
		e := beginObj(o.buf)
		e.str("error", "Conversation is busy with another active run.")
		o.buf = e.end()
	case hosted:
		name := th.id
		if th.isDefault() {
			name = "default"
		}
		o.str("error", "Conversation "+name+" is busy with another active run.")
	default:
		o.str("detail", "CONFLICT: Cannot send a new message: Another request (run_id="+runID+
			") is currently being processed for this conversation. Please wait for it to complete.")
		o.str("run_id", runID)
	}
	writeJSON(w, http.StatusConflict, o.end())
}

func (s *Sim) handleConvMessages(w http.ResponseWriter, req *http.Request) {
	th := s.threadOf(w, req, req.URL.Query().Get("agent_id"), "query", "agent_id")
	if th == nil {
		return
	}
	s.listThread(w, req, th.a, th)
}

// handleConvResume: POST /v1/conversations/{conversation_id}/stream.
func (s *Sim) handleConvResume(w http.ResponseWriter, req *http.Request) {
	raw, err := readBody(req)
	if err != nil {
		return
	}
	var body struct {
		AgentID *string `json:"agent_id"`
		RunID   *string `json:"run_id"`
		Otid    *string `json:"otid"`
		retrieveStreamRequest
	}
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &body); err != nil {
			writeValidation(w, "JSON decode error: "+err.Error())
			return
		}
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	th := s.threadOf(w, req, str(body.AgentID), "body", "agent_id")
	if th == nil {
		return
	}
	after, pings, ok := body.position(w)
	if !ok {
		return
	}
	r, st, msg := s.findRun(th, str(body.RunID), str(body.Otid))
	if r == nil {
		writeDetail(w, st, msg)
		return
	}
	s.resumeRun(w, req, r, after, pings)
}

// resumeRun streams a background run from after (a seq_id), or answers why it cannot: a
// scripted refusal (Fault.ResumeStatus), 400 not background, 410 too old.
func (s *Sim) resumeRun(w http.ResponseWriter, req *http.Request, r *run, after int64, pings bool) {
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
	pos := int(after)
	if int64(pos) != after {
		pos = int(^uint(0) >> 1)
	}
	if r.replayAll {
		pos = 0
	}
	s.streamRun(w, req, r, pos, pings, connFault{})
}

// handleConvCancel: POST /v1/conversations/{conversation_id}/cancel cancels the thread's active
// runs (those its conversation endpoints started) and answers {run_id: "cancelled"}.
func (s *Sim) handleConvCancel(w http.ResponseWriter, req *http.Request) {
	th := s.threadOf(w, req, req.URL.Query().Get("agent_id"), "query", "agent_id")
	if th == nil {
		return
	}
	var targets []*run
	th.a.mu.RLock()
	for _, r := range th.runs {
		if r.active() {
			targets = append(targets, r)
		}
	}
	th.a.mu.RUnlock()
	if len(targets) == 0 {
		writeDetail(w, http.StatusConflict, "NO_ACTIVE_RUNS_TO_CANCEL: No active runs to cancel for conversation "+th.name())
		return
	}
	s.cancelRuns(w, req, targets, map[string]string{})
}
