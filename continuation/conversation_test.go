package continuation_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

const (
	fakeAgent = "agent-0b3a8f0e-6c1d-4f6e-9a51-3c2a1d9e7b40"
	fakeConv  = "conv-5d7e2c11-8a4b-4c3d-b2e1-9f0a6b7c8d9e"
	fakeRun   = "run-1f2e3d4c-5b6a-4789-8abc-def012345678"
	fakeOtid  = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
)

// conflictServer answers every send with the 409 body, and describes
// fakeRun as a finished run whose user message has runOtid.
func conflictServer(t *testing.T, body, runOtid string) (*continuation.Runner, *atomic.Int32) {
	var sends atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/messages") || strings.HasSuffix(r.URL.Path, "/messages/stream")):
			sends.Add(1)
			w.WriteHeader(http.StatusConflict)
			_, _ = io.WriteString(w, body)
		case r.URL.Path == "/v1/runs/"+fakeRun+"/messages":
			_, _ = io.WriteString(w, `[{"id":"message-1","date":"2026-01-01T00:00:00+00:00","message_type":"user_message","otid":"`+runOtid+`","content":"hi","run_id":"`+fakeRun+`"},`+
				`{"id":"message-2","date":"2026-01-01T00:00:01+00:00","message_type":"assistant_message","otid":null,"content":"the answer","run_id":"`+fakeRun+`"}]`)
		case r.URL.Path == "/v1/runs/"+fakeRun:
			_, _ = io.WriteString(w, `{"id":"`+fakeRun+`","status":"completed","stop_reason":"end_turn","background":true}`)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	c, err := agentclient.New(agentclient.Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	r, err := continuation.New(continuation.Config{Client: c, Budget: testBudget()})
	if err != nil {
		t.Fatal(err)
	}
	return r, &sends
}

func busyBody(run string) string {
	return `{"detail": "CONFLICT: Cannot send a new message: Another request (run_id=` + run + `) is currently being processed for this conversation. Please wait for it to complete.", "run_id": "` + run + `"}`
}

// A busy 409 naming a run whose user message carries this turn's otid is
// this turn's own run: it is followed to its answer, never sent again.
func TestBusyWithOwnRunIsFollowed(t *testing.T) {
	r, sends := conflictServer(t, busyBody(fakeRun), fakeOtid)
	st := agentclient.NewStreamState()
	d := runTurn(context.Background(), r, continuation.Turn{AgentID: fakeAgent, ConversationID: fakeConv, Otid: fakeOtid, Text: "hi"}, st, continuation.Hooks{})
	if d.Outcome != continuation.Completed || d.RunID != fakeRun || st.Answer() != "the answer" || sends.Load() != 1 {
		t.Fatalf("decision %+v answer %q sends %d", d, st.Answer(), sends.Load())
	}
}

// A busy 409 for another run ends the attempt as Busy: retryable, no
// resend. A busy naming no run (the hosted form) costs one look at the
// history for the otid (it may be this turn's own run); here the
// history cannot be read (404), so the turn waits.
func TestBusyWithAnotherRunWaits(t *testing.T) {
	for body, lookups := range map[string]int{
		busyBody(fakeRun): 0,
		`{"error": "Conversation ` + fakeConv + ` is busy with another active run."}`: 1,
	} {
		r, sends := conflictServer(t, body, "11111111-2222-4333-8444-555555555555")
		d := runTurn(context.Background(), r, continuation.Turn{AgentID: fakeAgent, ConversationID: fakeConv, Otid: fakeOtid, Text: "hi"},
			agentclient.NewStreamState(), continuation.Hooks{})
		if d.Outcome != continuation.Busy || !d.Retryable || d.Resend != "" || d.Lookups != lookups || sends.Load() != 1 || !agentclient.IsBusy(d.Err) {
			t.Fatalf("%s: decision %+v, sends %d", body, d, sends.Load())
		}
	}
}

// A pending approval is permanent: rejected at once, saying why.
func TestPendingApprovalIsRejected(t *testing.T) {
	r, sends := conflictServer(t, `{"detail": "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call. Please approve or deny the pending request before continuing."}`, fakeOtid)
	for _, conv := range []string{fakeConv, ""} {
		d := runTurn(context.Background(), r, continuation.Turn{AgentID: fakeAgent, ConversationID: conv, Otid: fakeOtid, Text: "hi"},
			agentclient.NewStreamState(), continuation.Hooks{})
		if d.Outcome != continuation.Rejected || d.Retryable || !strings.Contains(d.Reason, "waiting for approval of a tool call") {
			t.Fatalf("conversation %q: decision %+v", conv, d)
		}
	}
	if sends.Load() != 2 {
		t.Fatalf("%d sends, want 2", sends.Load())
	}
}

func TestTurnConversationIDValidated(t *testing.T) {
	r, sends := conflictServer(t, "{}", fakeOtid)
	d := runTurn(context.Background(), r, continuation.Turn{AgentID: fakeAgent, ConversationID: "conv-demo", Otid: fakeOtid, Text: "hi"},
		agentclient.NewStreamState(), continuation.Hooks{})
	if d.Outcome != continuation.Rejected || sends.Load() != 0 {
		t.Fatalf("decision %+v sends %d", d, sends.Load())
	}
}
