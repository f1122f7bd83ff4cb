package app

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// What the listener does against hostile browsers and slow clients.

// refuseCrossOrigin refuses (403) every state-changing request (any method but GET, HEAD and
// OPTIONS) that a browser sends from another origin's page: Sec-Fetch-Site other than
// same-origin or none, or, from a browser without it, an Origin whose host is not the Host.
// Requests without either header (curl, integrations) pass. A browser sends basic-auth
// credentials by itself, so without this a page on any site could make a logged-in browser
// enqueue turns or, with the monitor writable, pause queues and delete tasks.
func refuseCrossOrigin(h http.Handler) http.Handler {
	p := http.NewCrossOriginProtection()
	p.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "forbidden: a cross-origin browser request may not change anything here (Sec-Fetch-Site / Origin is another site's); send it from the same origin or not from a browser", http.StatusForbidden)
	}))
	return p.Handler(h)
}

// loopbackHostOnly serves a listener without a token only the requests addressed to a loopback
// host: Host 127.0.0.1 (any loopback address), localhost or [::1], with or without the port.
// Such a listener is on loopback (the worker refuses to start otherwise), but a page of
// another site can still reach it by DNS rebinding: its own name, resolved to 127.0.0.1, in
// the Host, and its own origin in Origin and Sec-Fetch-Site, which refuseCrossOrigin then
// takes for the same origin. Only /healthz and /readyz (without ?verbose) answer any Host:
// they hold nothing.
func loopbackHostOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		open := (r.URL.Path == "/healthz" || r.URL.Path == "/readyz") && !r.URL.Query().Has("verbose")
		if open || isLoopbackHost(r.Host) {
			h.ServeHTTP(w, r)
			return
		}
		http.Error(w, "forbidden: without LETTAQ_HTTP_TOKEN this listener answers only requests addressed to 127.0.0.1, localhost or [::1], not to "+
			strconv.Quote(r.Host)+" (a page of another site can take that name); set LETTAQ_HTTP_TOKEN to reach it by another name", http.StatusForbidden)
	})
}

// isLoopbackHost reports whether host (a Host header: a name or address, with or without a
// port) names this machine's loopback: localhost or a loopback IP address.
func isLoopbackHost(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	} else if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Zone() == "" && ip.IsLoopback()
}

// HTTPServerOptions are the listener's timeouts.
type HTTPServerOptions struct {
	// IdleTimeout closes a keep-alive connection that waits this long for its next request.
	IdleTimeout time.Duration
	// BodyTimeout bounds the time a request's body may take to arrive, from the end of its
	// headers (which ReadHeaderTimeout bounds). Only the body: a handler may answer for as
	// long as it needs.
	BodyTimeout time.Duration
}

// readHeaderTimeout bounds the time a request's headers may take.
const readHeaderTimeout = 10 * time.Second

// NewHTTPServer returns the listener's server for h.
func NewHTTPServer(h http.Handler, o HTTPServerOptions) *http.Server {
	return &http.Server{Handler: withBodyDeadline(h, o.BodyTimeout), ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout: o.IdleTimeout}
}

// withBodyDeadline sets a read deadline of d on the connection while a request's body is read,
// and clears it when the body ends, so that a long answer is not cut (http.Server.ReadTimeout
// would also cancel the request's context at its deadline).
func withBodyDeadline(next http.Handler, d time.Duration) http.Handler {
	if d <= 0 {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			rc := http.NewResponseController(w)
			if err := rc.SetReadDeadline(time.Now().Add(d)); err == nil {
				r.Body = &deadlineBody{ReadCloser: r.Body, clear: func() { _ = rc.SetReadDeadline(time.Time{}) }}
			}
		}
		next.ServeHTTP(w, r)
	})
}

// deadlineBody clears the connection's read deadline once the body has been read to its end.
type deadlineBody struct {
	io.ReadCloser
	once  sync.Once
	clear func()
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF {
		b.once.Do(b.clear)
	}
	return n, err
}
