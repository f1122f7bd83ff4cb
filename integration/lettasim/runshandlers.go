package lettasim

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
)

// The runs endpoints: a run, its messages, the list of runs, and resuming its stream.

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
	ignoreAfter, reverseOrder := s.listQuirks(a)
	if ignoreAfter {
		p.after = ""
	}
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
	if reverseOrder {
		reverse(rows)
	}
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
