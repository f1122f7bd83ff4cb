package continuation

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
)

// A conversation deleted while its turn ran answers 404 to every read (its
// stream by otid, its history): a turn that must look for its otid first
// ends at once, Rejected for good, as a 404 on its run does, instead of
// searching for the admission grace and ending StillRunning on every
// attempt. Nothing is sent.
func TestDeletedConversationEndsTheTurn(t *testing.T) {
	var sends atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/conversations/conv-5d7e2c11-8a4b-4c3d-b2e1-9f0a6b7c8d9e/messages" {
			sends.Add(1)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = io.WriteString(w, `{"detail":"NOT_FOUND: Conversation not found"}`)
	}))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL, RequestTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := budget.Default()
	b.AdmissionGrace = 5 * time.Second
	r, err := New(Config{Client: c, Budget: b})
	if err != nil {
		t.Fatal(err)
	}
	turn := &Turn{AgentID: "agent-0b3a8f0e-6c1d-4f6e-9a51-3c2a1d9e7b40", Otid: "7c9e6679-7425-40de-944b-e07fc1f90ae7", Text: "hi",
		ConversationID: "conv-5d7e2c11-8a4b-4c3d-b2e1-9f0a6b7c8d9e", PriorIntent: true, Started: time.Now()}
	var d Result
	start := time.Now()
	r.Run(context.Background(), turn, agentclient.NewStreamState(), &Hooks{}, &d)
	took := time.Since(start)
	if d.Outcome != Rejected || d.Retryable || !agentclient.IsNotFound(d.Err) {
		t.Fatalf("%v retryable=%v err=%v (%s) after %v: want Rejected for good, a 404", d.Outcome, d.Retryable, d.Err, d.Reason, took)
	}
	if took > 2*time.Second || sends.Load() != 0 {
		t.Errorf("took %v (want at once, not the admission grace), %d sends (want 0)", took, sends.Load())
	}
}
