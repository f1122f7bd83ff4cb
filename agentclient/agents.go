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
