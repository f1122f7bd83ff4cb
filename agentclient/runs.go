package agentclient

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ListRunMessages lists one run's messages (GET /v1/runs/{id}/messages).
// Polling with After set to the last message id seen costs only what is new.
func (c *Client) ListRunMessages(ctx context.Context, runID string, o ListOptions) ([]Message, error) {
	if runID == "" {
		return nil, errors.New("agentclient: ListRunMessages: run id is empty")
	}
	var raw []json.RawMessage
	id, err := pathID("list run messages", "run_id", runID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "list run messages", http.MethodGet, "/v1/runs/"+id+"/messages", o.query(), nil, &raw); err != nil {
		return nil, err
	}
	return decodeMessages(raw)
}

// Run statuses.
const (
	RunCreated   = "created"
	RunRunning   = "running"
	RunCompleted = "completed"
	RunFailed    = "failed"
	RunCancelled = "cancelled"
)

// Run is Letta's run object (GET /v1/runs/{id}). Judge a finished run by
// StopReason, not Status: async runs report completed for failures too.
type Run struct {
	ID              string         `json:"id"`
	Status          string         `json:"status"`
	AgentID         string         `json:"agent_id"`
	ConversationID  string         `json:"conversation_id"`
	Background      bool           `json:"background"`
	StopReason      string         `json:"stop_reason"`
	CreatedAt       time.Time      `json:"created_at"`
	CompletedAt     *time.Time     `json:"completed_at"`
	Metadata        map[string]any `json:"metadata"`
	TTFTNs          int64          `json:"ttft_ns"`
	TotalDurationNs int64          `json:"total_duration_ns"`
}

// Active reports whether the run has not ended yet.
func (r *Run) Active() bool { return r.Status == RunCreated || r.Status == RunRunning }

// runWire tolerates nulls in Letta's Run.
type runWire struct {
	ID              string         `json:"id"`
	Status          *string        `json:"status"`
	AgentID         *string        `json:"agent_id"`
	ConversationID  *string        `json:"conversation_id"`
	Background      *bool          `json:"background"`
	StopReason      *string        `json:"stop_reason"`
	CreatedAt       *time.Time     `json:"created_at"`
	CompletedAt     *time.Time     `json:"completed_at"`
	Metadata        map[string]any `json:"metadata"`
	TTFTNs          *int64         `json:"ttft_ns"`
	TotalDurationNs *int64         `json:"total_duration_ns"`
}

func (w runWire) run() *Run {
	s := func(p *string) string {
		if p == nil {
			return ""
		}
		return *p
	}
	r := &Run{ID: w.ID, Status: s(w.Status), AgentID: s(w.AgentID), ConversationID: s(w.ConversationID),
		StopReason: s(w.StopReason), CompletedAt: w.CompletedAt, Metadata: w.Metadata}
	if w.Background != nil {
		r.Background = *w.Background
	}
	if w.CreatedAt != nil {
		r.CreatedAt = *w.CreatedAt
	}
	if w.TTFTNs != nil {
		r.TTFTNs = *w.TTFTNs
	}
	if w.TotalDurationNs != nil {
		r.TotalDurationNs = *w.TotalDurationNs
	}
	return r
}

// GetRun fetches a run.
func (c *Client) GetRun(ctx context.Context, runID string) (*Run, error) {
	if runID == "" {
		return nil, errors.New("agentclient: GetRun: run id is empty")
	}
	var w runWire
	id, err := pathID("get run", "run_id", runID)
	if err != nil {
		return nil, err
	}
	if err := c.doJSON(ctx, "get run", http.MethodGet, "/v1/runs/"+id, nil, nil, &w); err != nil {
		return nil, err
	}
	return w.run(), nil
}

// ListRunsOptions filter GET /v1/runs/.
type ListRunsOptions struct {
	AgentID  string
	Statuses []string
	Active   bool
	Limit    int
	Order    string
}

// ListRuns lists runs.
func (c *Client) ListRuns(ctx context.Context, o ListRunsOptions) ([]*Run, error) {
	q := url.Values{}
	if o.AgentID != "" {
		q.Set("agent_id", o.AgentID)
	}
	for _, s := range o.Statuses {
		q.Add("statuses", s)
	}
	if o.Active {
		q.Set("active", "true")
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Order != "" {
		q.Set("order", o.Order)
	}
	var ws []runWire
	if err := c.doJSON(ctx, "list runs", http.MethodGet, "/v1/runs/", q, nil, &ws); err != nil {
		return nil, err
	}
	out := make([]*Run, len(ws))
	for i, w := range ws {
		out[i] = w.run()
	}
	return out, nil
}
