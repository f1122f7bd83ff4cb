package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
)

// agentIDRE is the shape of a Letta agent id, "agent-<uuid4>" (the path pattern of Letta's
// OpenAPI document: a server answers 422 to anything else).
var agentIDRE = regexp.MustCompile(`^agent-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// IsAgentID reports whether s has the shape of a Letta agent id, "agent-<uuid4>".
func IsAgentID(s string) bool { return agentIDRE.MatchString(s) }

// ListAgents lists the agents named name (GET /v1/agents/?name=), or every agent when name
// is empty (the server's first page: up to 50).
func (c *Client) ListAgents(ctx context.Context, name string) ([]Agent, error) {
	q := url.Values{}
	if name != "" {
		q.Set("name", name)
	}
	var raw []json.RawMessage
	if err := c.doJSON(ctx, "list agents", http.MethodGet, "/v1/agents/", q, nil, &raw); err != nil {
		return nil, err
	}
	out := make([]Agent, 0, len(raw))
	for _, r := range raw {
		var a Agent
		if err := json.Unmarshal(r, &a); err != nil {
			return nil, fmt.Errorf("agentclient: list agents: %w", err)
		}
		out = append(out, a)
	}
	return out, nil
}

// ErrAgentName is wrapped by ResolveAgent when a name matches no agent or several.
var ErrAgentName = errors.New("agent name does not name exactly one agent")

// ResolveAgent returns the agent id for idOrName: an agent id is returned as it is (no
// request); a name is looked up with ListAgents and must match exactly one agent.
func (c *Client) ResolveAgent(ctx context.Context, idOrName string) (string, error) {
	idOrName = strings.TrimSpace(idOrName)
	if idOrName == "" {
		return "", errors.New("agentclient: agent id or name is empty")
	}
	if IsAgentID(idOrName) {
		return idOrName, nil
	}
	agents, err := c.ListAgents(ctx, idOrName)
	if err != nil {
		return "", err
	}
	var ids []string
	for _, a := range agents {
		if a.Name == idOrName { // a server that ignores the filter must not pick a stranger
			ids = append(ids, a.ID)
		}
	}
	switch len(ids) {
	case 1:
		return ids[0], nil
	case 0:
		return "", fmt.Errorf("agentclient: no agent is named %q (give an agent id, agent-<uuid4>, or the name of one agent): %w", idOrName, ErrAgentName)
	}
	return "", fmt.Errorf("agentclient: %d agents are named %q (%s): give the agent id: %w", len(ids), idOrName, strings.Join(ids, ", "), ErrAgentName)
}

// ListAgentMessages lists an agent's history (GET /v1/agents/{id}/messages).
// Letta may return a desc page oldest-first: do not rely on order inside a
// page. A cursor that does not exist is a 404.
func (c *Client) ListAgentMessages(ctx context.Context, agentID string, o ListOptions) ([]Message, error) {
	if agentID == "" {
		return nil, errors.New("agentclient: ListAgentMessages: agent id is empty")
	}
	var raw []json.RawMessage
	id, err := pathID("list agent messages", "agent_id", agentID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "list agent messages", http.MethodGet, "/v1/agents/"+id+"/messages", o.query(), nil, &raw); err != nil {
		return nil, err
	}
	return decodeMessages(raw)
}

// SendAsync sends the message with POST /v1/agents/{id}/messages/async: the
// server answers at once with the run, and runs the turn itself. Use the
// same otid as any earlier attempt of the turn.
func (c *Client) SendAsync(ctx context.Context, req SendRequest) (*Run, error) {
	if err := req.validate(); err != nil {
		return nil, err
	}
	if req.ConversationID != "" {
		return nil, errors.New("agentclient: SendAsync: conversations take streaming sends (SendStream with Background)")
	}
	var w runWire
	id, err := pathID("send async", "agent_id", req.AgentID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "send async", http.MethodPost, "/v1/agents/"+id+"/messages/async", nil, req.body(), &w); err != nil {
		return nil, err
	}
	return w.run(), nil
}

// CancelRuns cancels an agent's runs (all active ones when runIDs is empty).
// Letta answers 409 when nothing is running.
func (c *Client) CancelRuns(ctx context.Context, agentID string, runIDs []string) (map[string]string, error) {
	if agentID == "" {
		return nil, errors.New("agentclient: CancelRuns: agent id is empty")
	}
	body := map[string]any{}
	if len(runIDs) > 0 {
		body["run_ids"] = runIDs
	}
	out := map[string]string{}
	id, err := pathID("cancel runs", "agent_id", agentID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "cancel runs", http.MethodPost, "/v1/agents/"+id+"/messages/cancel", nil, body, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// Agent is the part of AgentState lettaq uses.
type Agent struct {
	ID   string `json:"id"`
	Name string `json:"name"`
}

// GetAgent fetches an agent (a 404 means it does not exist).
func (c *Client) GetAgent(ctx context.Context, agentID string) (*Agent, error) {
	if agentID == "" {
		return nil, errors.New("agentclient: GetAgent: agent id is empty")
	}
	var a Agent
	id, err := pathID("get agent", "agent_id", agentID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "get agent", http.MethodGet, "/v1/agents/"+id, nil, nil, &a); err != nil {
		return nil, err
	}
	return &a, nil
}
