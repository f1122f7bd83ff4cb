package continuation_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/integration/lettasim"
)

// proxied points e's client and runner at a proxy in front of the
// simulator; wrap decides, request by request, what the proxy does (next
// passes the request on).
func (e *env) proxied(t *testing.T, wrap func(w http.ResponseWriter, r *http.Request, next http.Handler)) {
	t.Helper()
	u, _ := url.Parse(e.sim.URL)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ErrorHandler = func(w http.ResponseWriter, r *http.Request, err error) { w.WriteHeader(http.StatusBadGateway) }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { wrap(w, r, rp) }))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: e.b.RequestTimeout})
	if err != nil {
		t.Fatal(err)
	}
	r, err := continuation.New(continuation.Config{Client: c, Budget: e.b})
	if err != nil {
		t.Fatal(err)
	}
	e.client, e.runner = c, r
}

// runMessagesOf returns the run id of a GET /v1/runs/{id}/messages, or "".
func runMessagesOf(r *http.Request) string {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/runs/")
	if !ok || r.Method != http.MethodGet {
		return ""
	}
	id, ok := strings.CutSuffix(rest, "/messages")
	if !ok {
		return ""
	}
	return id
}

// An ended run whose messages could not be read before the follow's window
// closed is StillRunning (the next attempt reads them), never an answer made
// of what the cut stream had. The proxy hangs GET /v1/runs/{id}/messages once
// the run has ended, and RequestTimeout = ContinuationMax, so the poll of the
// ended run is cut by the window's end.
func TestEndedRunWithUnreadMessagesIsStillRunning(t *testing.T) {
	sc := lettasim.QuickScript("the real answer")
	e := newEnv(t, &sc, func(b *budget.Config) {
		b.Resume = false
		b.ContinuationMax, b.RequestTimeout = 500*time.Millisecond, 500*time.Millisecond
	})
	e.proxied(t, func(w http.ResponseWriter, r *http.Request, next http.Handler) {
		if id := runMessagesOf(r); id != "" {
			if ri, ok := e.sim.Run(id); ok && !ri.Ended.IsZero() {
				<-r.Context().Done() // hang once the run ended
				return
			}
		}
		next.ServeHTTP(w, r)
	})
	e.sim.SetFault(e.agent, lettasim.Fault{DisconnectAfter: 2})
	st := agentclient.NewStreamState()
	tu := e.turn("question")
	d := e.run(t, tu, st, 1)
	if d.Outcome != continuation.StillRunning {
		t.Fatalf("decision %v stop %q reason %q, answer %q: want still_running (the run's messages were not read)",
			d.Outcome, d.StopReason, d.Reason, st.Answer())
	}

	// The next attempt reads them.
	e.proxied(t, func(w http.ResponseWriter, r *http.Request, next http.Handler) { next.ServeHTTP(w, r) })
	tu.PriorIntent = true
	d = e.run(t, tu, st, 1)
	if d.Outcome != continuation.Completed || st.Answer() != "the real answer" {
		t.Fatalf("next attempt: decision %v reason %q, answer %q: want the run's answer", d.Outcome, d.Reason, st.Answer())
	}
}
