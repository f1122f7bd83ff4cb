package agentclient

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
)

// ListOptions page through messages. Zero values leave the server defaults
// (limit 100; order desc for agent messages, asc for run messages).
type ListOptions struct {
	After  string
	Before string
	Limit  int
	// Order is "asc" or "desc".
	Order string
}

func (o ListOptions) query() url.Values {
	q := url.Values{}
	if o.After != "" {
		q.Set("after", o.After)
	}
	if o.Before != "" {
		q.Set("before", o.Before)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	if o.Order != "" {
		q.Set("order", o.Order)
	}
	return q
}

func decodeMessages(raw []json.RawMessage) ([]Message, error) {
	out := make([]Message, 0, len(raw))
	for _, r := range raw {
		m, err := DecodeMessage(r)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	return out, nil
}

// Health checks GET /v1/health/.
func (c *Client) Health(ctx context.Context) error {
	return c.doJSON(ctx, "health", http.MethodGet, "/v1/health/", nil, nil, nil)
}
