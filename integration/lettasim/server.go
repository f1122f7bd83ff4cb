package lettasim

import (
	"net/http"
	"net/http/httptest"
	"sync"
)

// Server is a Sim listening on a loopback port, like httptest.Server.
type Server struct {
	*Sim
	// URL is the base URL, "http://127.0.0.1:<port>" (no trailing slash): the Letta base URL.
	URL string

	ts        *httptest.Server
	closeOnce sync.Once
}

// NewServer starts a Sim on 127.0.0.1:0. Close it when done.
func NewServer(cfg Config) *Server {
	sim := New(cfg)
	ts := httptest.NewUnstartedServer(sim)
	ts.Config.ErrorLog = nil
	ts.Start()
	return &Server{Sim: sim, URL: ts.URL, ts: ts}
}

// Client returns an http.Client for the server (its transport is closed by Close).
func (s *Server) Client() *http.Client { return s.ts.Client() }

// Close ends the runs in flight and the open streams, closes client connections and stops the
// server. It is idempotent.
func (s *Server) Close() {
	s.closeOnce.Do(func() {
		s.Sim.Close()
		s.ts.CloseClientConnections()
		s.ts.Close()
	})
}
