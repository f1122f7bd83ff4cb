package agentclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"
)

// DefaultBaseURL is a self-hosted Letta server's address.
const DefaultBaseURL = "http://localhost:8283"

// DefaultUserAgent is sent with every request. The streaming endpoint used
// here (/messages/stream) does not apply Letta's User-Agent check.
const DefaultUserAgent = "lettaq-agentclient/1"

// Clocks bound one streaming read. Zero fields take the defaults.
type Clocks struct {
	// Connect: from sending the request to the first byte of the body.
	Connect time.Duration
	// Stall: the longest time without any byte (pings count) once connected.
	Stall time.Duration
	// Total: cap on the read, measured from the first byte.
	Total time.Duration
	// ContentIdle: after this long with only pings, OnIdle is told the
	// agent is still thinking. It never aborts the read. Negative disables.
	ContentIdle time.Duration
	// StopGrace: after stop_reason, how long to wait for the body to close
	// before closing it and counting the turn complete.
	StopGrace time.Duration
}

// DefaultClocks are the clocks used when a field is zero.
var DefaultClocks = Clocks{
	Connect:     30 * time.Second,
	Stall:       75 * time.Second,
	Total:       5 * time.Minute,
	ContentIdle: 10 * time.Second,
	StopGrace:   2 * time.Second,
}

func (c Clocks) withDefaults() Clocks {
	d := DefaultClocks
	if c.Connect > 0 {
		d.Connect = c.Connect
	}
	if c.Stall > 0 {
		d.Stall = c.Stall
	}
	if c.Total > 0 {
		d.Total = c.Total
	}
	if c.ContentIdle != 0 {
		d.ContentIdle = c.ContentIdle
	}
	if c.StopGrace > 0 {
		d.StopGrace = c.StopGrace
	}
	return d
}

// Config configures a Client.
type Config struct {
	// BaseURL of the Letta server, e.g. http://localhost:8283 or
	// https://api.letta.com. Default DefaultBaseURL.
	BaseURL string
	// APIKey is sent as a Bearer token when set. It never appears in errors.
	APIKey string
	// ProjectID, when set, is sent as X-Project-Id.
	ProjectID string
	// HTTPClient to use. Its Timeout must be 0: streams are bounded by
	// Clocks, other calls by RequestTimeout. Default: a client with a
	// transport tuned for many concurrent streams to one host.
	HTTPClient *http.Client
	// UserAgent, default DefaultUserAgent.
	UserAgent string
	// Clocks for streaming reads (per call overridable).
	Clocks Clocks
	// RequestTimeout bounds each non-streaming call. Default 15s.
	RequestTimeout time.Duration
	// MaxLineBytes bounds one SSE line. Default DefaultMaxLineBytes (at
	// most MaxEventBytes).
	MaxLineBytes int
	// MaxEventBytes bounds one SSE event (its data lines joined). Default
	// DefaultMaxEventBytes.
	MaxEventBytes int
	// MaxResponseBytes bounds the body of every non-streaming answer.
	// Default DefaultMaxResponseBytes.
	MaxResponseBytes int
	// MaxTranscriptBytes bounds the text a turn's StreamState accumulates.
	// Default DefaultMaxTranscriptBytes.
	MaxTranscriptBytes int
	// StreamTransport: how streams reach the server. Default
	// StreamDedicated (a connection per stream, no goroutine of its own).
	StreamTransport StreamTransport
}

// Client talks to one Letta server. It is safe for concurrent use.
type Client struct {
	base   *url.URL
	cfg    Config
	hc     *http.Client
	sc     *streamConns // nil: streams go through hc
	clocks Clocks
}

// NewTransport returns the transport the default client uses: keep-alive
// connections to one host without a cap on their number, since every
// in-flight turn holds a stream.
func NewTransport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 0
	t.MaxIdleConnsPerHost = 256
	t.MaxConnsPerHost = 0
	t.IdleConnTimeout = 90 * time.Second
	t.ResponseHeaderTimeout = 0 // the connect clock covers this
	t.DialContext = (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	return t
}

// New returns a client. It checks the configuration but does not contact
// the server.
func New(cfg Config) (*Client, error) {
	if cfg.BaseURL == "" {
		cfg.BaseURL = DefaultBaseURL
	}
	u, err := url.Parse(strings.TrimRight(cfg.BaseURL, "/"))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("agentclient: base URL %q: want http(s)://host[:port][/prefix]", redactURL(cfg.BaseURL))
	}
	if u.User != nil {
		return nil, errors.New("agentclient: base URL must not carry credentials; use APIKey")
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	for _, h := range []struct{ field, value string }{{"APIKey", cfg.APIKey}, {"ProjectID", cfg.ProjectID}, {"UserAgent", cfg.UserAgent}} {
		if i := headerCTL(h.value); i >= 0 {
			// net/http refuses such a header value on every request, the
			// dedicated transport would send it: both refuse it here.
			return nil, fmt.Errorf("agentclient: Config.%s holds the control byte %#02x at byte %d (a header value must not hold line breaks, NUL or DEL)", h.field, h.value[i], i)
		}
	}
	if cfg.RequestTimeout <= 0 {
		cfg.RequestTimeout = 15 * time.Second
	}
	cfg.limitDefaults()
	mode, err := ParseStreamTransport(string(cfg.StreamTransport))
	if err != nil {
		return nil, fmt.Errorf("agentclient: %w", err)
	}
	cfg.StreamTransport = mode
	hc := noRedirects(cfg.HTTPClient)
	return &Client{base: u, cfg: cfg, hc: hc, sc: newStreamConns(u, hc, mode), clocks: cfg.Clocks.withDefaults()}, nil
}

// StreamTransport reports how this client's streams reach the server:
// StreamNetHTTP when StreamDedicated was asked for but cannot be used (a
// custom RoundTripper, a proxy).
func (c *Client) StreamTransport() StreamTransport {
	if c.sc == nil {
		return StreamNetHTTP
	}
	return StreamDedicated
}

// CloseIdleConnections closes the connections the client keeps for later
// requests: its HTTPClient's idle connections and those kept for the next
// dedicated streams. Streams and requests in flight are not affected.
func (c *Client) CloseIdleConnections() {
	c.hc.CloseIdleConnections()
	if c.sc != nil {
		c.sc.idle.closeIdle()
	}
}

// Clocks returns the client's default stream clocks.
func (c *Client) Clocks() Clocks { return c.clocks }

// headerCTL returns the index of the first byte of v a header value must
// not hold (httpguts.ValidHeaderFieldValue: a control byte other than tab,
// or DEL), or -1.
func headerCTL(v string) int {
	for i := 0; i < len(v); i++ {
		if b := v[i]; b < ' ' && b != '\t' || b == 0x7f {
			return i
		}
	}
	return -1
}

// redactURL returns s with its user info (everything up to the last '@',
// whatever it holds: a password with '/' or '%' does not parse) shown as
// REDACTED.
func redactURL(s string) string {
	end := strings.LastIndex(s, "@")
	if end < 0 {
		return s
	}
	start := 0
	if i := strings.Index(s, "//"); i >= 0 && i < end {
		start = i + 2
	}
	return s[:start] + "REDACTED@" + s[end+1:]
}

func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body any) (*http.Request, error) {
	u := *c.base
	u.Path = c.base.Path + path
	if len(query) > 0 {
		u.RawQuery = query.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u.String(), rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("User-Agent", c.cfg.UserAgent)
	if c.cfg.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.cfg.APIKey)
	}
	if c.cfg.ProjectID != "" {
		req.Header.Set("X-Project-Id", c.cfg.ProjectID)
	}
	return req, nil
}

// apiError turns a non-2xx response into an *Error (reading at most 64 KiB
// of its body, under the request's context). The connection after a 101
// Switching Protocols is not an HTTP body: it is not read (net/http would
// hand it over as the body, unbounded by the request's context).
func (c *Client) apiError(op, method, path string, resp *http.Response) *Error {
	var body []byte
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ = io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	}
	eb := parseErrorBody(body)
	detail := eb.detail
	if loc := resp.Header.Get("Location"); resp.StatusCode >= 300 && resp.StatusCode < 400 && loc != "" {
		// Streams are not redirected: a POST must not silently become a GET
		// or go elsewhere. Say where the server points.
		detail = "redirected to " + redactURL(loc) + ": set the Letta base URL to the address that answers"
	}
	return &Error{
		Op: op, Method: method, Path: path, StatusCode: resp.StatusCode,
		Detail: c.redact(detail), RunID: eb.runID, Code: c.redact(eb.code), NotAdmitted: eb.notAdmitted,
		RetryAfter: parseRetryAfter(resp.Header.Get("Retry-After"), time.Now()),
	}
}

func (c *Client) transportError(op, method, path string, err error) *Error {
	// url.Error repeats the URL; keep only the cause, and never the key.
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return &Error{Op: op, Method: method, Path: path, Err: redactErr{err, c.cfg.APIKey}}
}

func (c *Client) redact(s string) string {
	if c.cfg.APIKey != "" {
		s = strings.ReplaceAll(s, c.cfg.APIKey, "[REDACTED]")
	}
	return s
}

// redactErr hides the API key should a transport error ever echo it.
type redactErr struct {
	err error
	key string
}

func (r redactErr) Error() string {
	s := r.err.Error()
	if r.key != "" {
		s = strings.ReplaceAll(s, r.key, "[REDACTED]")
	}
	return s
}
func (r redactErr) Unwrap() error { return r.err }

// doJSON performs a bounded non-streaming call and decodes the JSON answer
// into out (if non-nil). It returns the number of body bytes read.
func (c *Client) doJSON(ctx context.Context, op, method, path string, query url.Values, body, out any) error {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return fmt.Errorf("letta: %s: %w", op, err)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return c.transportError(op, req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return c.apiError(op, req.Method, req.URL.Path, resp)
	}
	lb := &limitedBody{r: resp.Body, n: c.cfg.MaxResponseBytes}
	var b []byte
	if out == nil {
		_, err = io.Copy(io.Discard, lb)
	} else {
		b, err = readBounded(lb, resp.ContentLength, c.cfg.MaxResponseBytes)
	}
	switch {
	case lb.over:
		return &ProtocolError{Op: op, Method: req.Method, Path: req.URL.Path, Err: ErrResponseTooLarge,
			Limit: c.cfg.MaxResponseBytes, LimitName: "MaxResponseBytes"}
	case err != nil:
		return c.transportError(op, req.Method, req.URL.Path, fmt.Errorf("read response: %w", err))
	case out != nil:
		if err := json.Unmarshal(b, out); err != nil {
			return c.transportError(op, req.Method, req.URL.Path, fmt.Errorf("decode response: %w", err))
		}
	}
	return nil
}
