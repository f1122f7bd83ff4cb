package fakeplatform

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// wireCall is one adapter call over HTTP (POST /call).
type wireCall struct {
	Method  string              `json:"method"`
	Chat    record.Conversation `json:"chat"`
	ID      string              `json:"id,omitempty"`
	Message relay.Message       `json:"message"`
	Status  relay.Status        `json:"status"`
}

// wireResult is the answer to a wireCall.
type wireResult struct {
	ID           string `json:"id,omitempty"`
	Error        string `json:"error,omitempty"`
	Permanent    bool   `json:"permanent,omitempty"`
	RetryAfterMS int64  `json:"retry_after_ms,omitempty"`
}

// Handler serves the platform's calls over HTTP, for Client.
func (p *Platform) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var c wireCall
		if err := json.NewDecoder(r.Body).Decode(&c); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var res wireResult
		var err error
		ctx := r.Context()
		switch c.Method {
		case "send":
			res.ID, err = p.Send(ctx, c.Chat, c.Message)
		case "edit":
			err = p.Edit(ctx, c.Chat, c.ID, c.Message)
		case "delete":
			err = p.Delete(ctx, c.Chat, c.ID)
		case "status":
			err = p.Status(ctx, c.Chat, c.Status)
		default:
			http.Error(w, "unknown method", http.StatusBadRequest)
			return
		}
		var rl *relay.RateLimitedError
		switch {
		case errors.As(err, &rl):
			w.WriteHeader(http.StatusTooManyRequests)
			res.RetryAfterMS = rl.RetryAfter.Milliseconds()
		case err != nil:
			res.Error, res.Permanent = err.Error(), errors.Is(err, relay.ErrPermanent)
		}
		_ = json.NewEncoder(w).Encode(res)
	})
}

// Client is the relay.Adapter that calls a Platform's Handler at URL.
type Client struct {
	URL   string
	HTTP  *http.Client
	Limit relay.Limits
}

// Limits implements relay.Adapter.
func (c *Client) Limits() relay.Limits { return c.Limit }

func (c *Client) call(ctx context.Context, wc wireCall) (string, error) {
	b, _ := json.Marshal(wc)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.URL+"/call", bytes.NewReader(b))
	if err != nil {
		return "", err
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	var res wireResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		return "", fmt.Errorf("fakeplatform: %s: %w", resp.Status, err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		return "", &relay.RateLimitedError{RetryAfter: time.Duration(res.RetryAfterMS) * time.Millisecond}
	case res.Permanent:
		return "", fmt.Errorf("fakeplatform: %s: %w", res.Error, relay.ErrPermanent)
	case res.Error != "":
		return "", errors.New(res.Error)
	}
	return res.ID, nil
}

// Send implements relay.Adapter.
func (c *Client) Send(ctx context.Context, chat record.Conversation, m relay.Message) (string, error) {
	return c.call(ctx, wireCall{Method: "send", Chat: chat, Message: m})
}

// Edit implements relay.Adapter.
func (c *Client) Edit(ctx context.Context, chat record.Conversation, id string, m relay.Message) error {
	_, err := c.call(ctx, wireCall{Method: "edit", Chat: chat, ID: id, Message: m})
	return err
}

// Delete implements relay.Adapter.
func (c *Client) Delete(ctx context.Context, chat record.Conversation, id string) error {
	_, err := c.call(ctx, wireCall{Method: "delete", Chat: chat, ID: id})
	return err
}

// Status implements relay.Adapter.
func (c *Client) Status(ctx context.Context, chat record.Conversation, s relay.Status) error {
	_, err := c.call(ctx, wireCall{Method: "status", Chat: chat, Status: s})
	return err
}
