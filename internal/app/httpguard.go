package app

import (
	"io"
	"net/http"
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
