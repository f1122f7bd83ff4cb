package lettasim

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// The agent endpoints other than sends and the message list: the agent itself, the
// list, creating one, and cancelling its runs.

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
