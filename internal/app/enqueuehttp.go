package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue"
)

// maxEnqueueBodyBytes bounds the body the worker's /enqueue reads to look at agent_id. It is
// the bound of the queue's own handler (httpapi.EnqueueHandler; TestEnqueueBodyBoundMatchesQueue
// holds them equal): a body past it is handed on unread, for the queue's 413.
const maxEnqueueBodyBytes = 6*(queue.MaxTextBytes+64<<10) + 2*(queue.MaxImagesBytes/3*4)

// enqueueHTTPHandler is the worker's POST /enqueue: the queue's handler, behind a check that
// agent_id, when given, is an agent id (agent-<uuid4>, the pattern Letta's API requires).
//
// A name there is refused (400, field agent_id) rather than looked up as enqueue --agent does:
// /enqueue is a producer's hot path, and a look-up would make every enqueue wait on Letta and
// fail while Letta is down (the queue exists to take messages then); names are not unique at
// Letta and can be changed, so the same name could reach another agent tomorrow. A producer
// finds the id once (GET /v1/agents/?name=) and keeps it. Before this check a name was
// accepted (202) and the turn archived later with Letta's 422.
func enqueueHTTPHandler(inner http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Body == nil {
			inner.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxEnqueueBodyBytes+1))
		if err != nil || len(body) > maxEnqueueBodyBytes {
			// Unreadable or too large: the queue's handler answers it (400 or 413) in its words.
			r.Body = readCloser{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
			inner.ServeHTTP(w, r)
			return
		}
		if id, ok := agentIDField(body); ok && id != "" && !agentclient.IsAgentID(id) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusBadRequest)
			_ = json.NewEncoder(w).Encode(map[string]string{"field": "agent_id", "error": fmt.Sprintf(
				"agent_id %s is not an agent id (agent-<uuid4>); /enqueue takes ids only: find the agent's id once with GET /v1/agents/?name=<name> at your Letta server (enqueue --agent <name> does that)",
				quoteShort(id, 80))})
			return
		}
		r.Body = readCloser{bytes.NewReader(body), r.Body}
		inner.ServeHTTP(w, r)
	})
}

// agentIDField is the body's top-level agent_id when it is a JSON object with a string there
// (matched as encoding/json matches field names); anything else is left to the queue.
func agentIDField(body []byte) (string, bool) {
	var p struct {
		AgentID *string `json:"agent_id"`
	}
	if json.Unmarshal(body, &p) != nil || p.AgentID == nil {
		return "", false
	}
	return *p.AgentID, true
}

// quoteShort quotes s, cut to max bytes (a producer's mistake echoed, not its whole payload).
func quoteShort(s string, max int) string {
	if len(s) > max {
		return strconv.Quote(s[:max]) + "…"
	}
	return strconv.Quote(s)
}

// readCloser reads from one reader and closes another (the request's own body).
type readCloser struct {
	io.Reader
	c io.Closer
}

func (rc readCloser) Close() error { return rc.c.Close() }
