package lettasim

import (
	"net/http"
	"sync/atomic"
)

// Endpoint names an API endpoint in RequestStats.
type Endpoint int

const (
	EndpointOther         Endpoint = iota // unknown paths
	EndpointStream                        // POST /v1/agents/{id}/messages/stream
	EndpointSend                          // POST /v1/agents/{id}/messages (streaming or not)
	EndpointAsync                         // POST /v1/agents/{id}/messages/async
	EndpointCancel                        // POST /v1/agents/{id}/messages/cancel
	EndpointListMessages                  // GET  /v1/agents/{id}/messages
	EndpointGetRun                        // GET  /v1/runs/{run_id}
	EndpointRunMessages                   // GET  /v1/runs/{run_id}/messages
	EndpointResume                        // POST /v1/runs/{run_id}/stream
	EndpointListRuns                      // GET  /v1/runs/
	EndpointAgent                         // GET /v1/agents/{id}, GET/POST /v1/agents/
	EndpointHealth                        // GET  /v1/health/
	EndpointConversations                 // POST/GET /v1/conversations/, GET /v1/conversations/{id}
	EndpointConvSend                      // POST /v1/conversations/{id}/messages
	EndpointConvMessages                  // GET  /v1/conversations/{id}/messages
	EndpointConvResume                    // POST /v1/conversations/{id}/stream
	EndpointConvCancel                    // POST /v1/conversations/{id}/cancel
	numEndpoints
)

var endpointNames = [numEndpoints]string{
	"other", "stream", "send", "async", "cancel", "list_messages", "get_run", "run_messages",
	"resume", "list_runs", "agent", "health", "conversations", "conv_send", "conv_messages",
	"conv_resume", "conv_cancel",
}

func (e Endpoint) String() string {
	if e < 0 || e >= numEndpoints {
		return "invalid"
	}
	return endpointNames[e]
}

// EndpointStats counts one endpoint's traffic.
type EndpointStats struct {
	Requests int64
	Bytes    int64 // response body bytes
	Errors   int64 // responses with status >= 400
}

// RequestStats is a snapshot of the request counters (see Sim.Requests).
type RequestStats struct {
	Total      EndpointStats
	ByEndpoint map[Endpoint]EndpointStats // endpoints with at least one request
}

// Get returns the counters of one endpoint.
func (r RequestStats) Get(e Endpoint) EndpointStats { return r.ByEndpoint[e] }

type counters struct{ requests, bytes, errors atomic.Int64 }

type stats struct {
	eps       [numEndpoints]counters
	conflicts atomic.Int64 // 409 busy answers
}

// Requests returns the request counters: per endpoint, requests, response bytes and errors.
// Benchmarks use it for "bytes and requests per poll".
func (s *Sim) Requests() RequestStats {
	out := RequestStats{ByEndpoint: make(map[Endpoint]EndpointStats)}
	for i := range s.stats.eps {
		c := &s.stats.eps[i]
		es := EndpointStats{Requests: c.requests.Load(), Bytes: c.bytes.Load(), Errors: c.errors.Load()}
		if es.Requests == 0 {
			continue
		}
		out.ByEndpoint[Endpoint(i)] = es
		out.Total.Requests += es.Requests
		out.Total.Bytes += es.Bytes
		out.Total.Errors += es.Errors
	}
	return out
}

// Conflicts returns how many 409 "busy" answers the Sim has given: a locked conversation, or
// an agent with OneRunPerAgent or a Busy fault.
func (s *Sim) Conflicts() int64 { return s.stats.conflicts.Load() }

// ResetRequests zeroes the request counters.
func (s *Sim) ResetRequests() {
	for i := range s.stats.eps {
		c := &s.stats.eps[i]
		c.requests.Store(0)
		c.bytes.Store(0)
		c.errors.Store(0)
	}
}

// countingWriter counts the body bytes of one response.
type countingWriter struct {
	http.ResponseWriter
	c           *counters
	wroteHeader bool
}

func (w *countingWriter) WriteHeader(code int) {
	if !w.wroteHeader {
		w.wroteHeader = true
		if code >= 400 {
			w.c.errors.Add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.wroteHeader = true
	n, err := w.ResponseWriter.Write(b)
	w.c.bytes.Add(int64(n))
	return n, err
}

func (w *countingWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
