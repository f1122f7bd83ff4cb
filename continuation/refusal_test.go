package continuation_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/continuation"
)

// refusalServer answers every send with status, Retry-After and body; the
// conversation's history holds the turn's message (with fakeRun) when
// stored, else one other message; fakeRun is a finished run whose user
// message carries fakeOtid.
type refusalServer struct {
	sends, lookups atomic.Int32
	listRefusals   atomic.Int32 // history reads still to answer 429
	runner         *continuation.Runner
}

func newRefusalServer(t *testing.T, status int, retryAfter, body string, stored bool) *refusalServer {
	rs := &refusalServer{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && (strings.HasSuffix(r.URL.Path, "/messages") || strings.HasSuffix(r.URL.Path, "/messages/stream")):
			rs.sends.Add(1)
			if retryAfter != "" {
				w.Header().Set("Retry-After", retryAfter)
			}
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/stream"):
			w.WriteHeader(http.StatusNotFound) // no run for the otid (resume by otid)
			_, _ = io.WriteString(w, `{"detail":"No run found for otid"}`)
		case r.Method == http.MethodGet && (r.URL.Path == "/v1/conversations/"+fakeConv+"/messages" || r.URL.Path == "/v1/agents/"+fakeAgent+"/messages"):
			if rs.listRefusals.Add(-1) >= 0 {
				w.Header().Set("Retry-After", "0")
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, `{"detail": "RATE_LIMIT_EXCEEDED: too many requests"}`)
				return
			}
			if r.URL.Query().Get("after") != "" {
				_, _ = io.WriteString(w, `[]`) // the end of the history
				return
			}
			rs.lookups.Add(1)
			otid := "11111111-2222-4333-8444-555555555555"
			if stored {
				otid = fakeOtid
			}
			_, _ = io.WriteString(w, `[{"id":"message-1","date":"2099-01-01T00:00:00+00:00","message_type":"user_message","otid":"`+otid+`","content":"hi","run_id":"`+fakeRun+`"}]`)
		case r.URL.Path == "/v1/runs/"+fakeRun+"/messages":
			_, _ = io.WriteString(w, `[{"id":"message-1","date":"2026-01-01T00:00:00+00:00","message_type":"user_message","otid":"`+fakeOtid+`","content":"hi","run_id":"`+fakeRun+`"},`+
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
	rs.runner, err = continuation.New(continuation.Config{Client: c, Budget: testBudget()})
	if err != nil {
		t.Fatal(err)
	}
	return rs
}

// run runs the turn (conversation mode unless agentMode) and returns its
// decision and the phases it went through.
func (rs *refusalServer) run(agentMode bool) (continuation.Result, []continuation.Activity) {
	var mu sync.Mutex
	var phases []continuation.Activity
	t := continuation.Turn{AgentID: fakeAgent, ConversationID: fakeConv, Otid: fakeOtid, Text: "hi"}
	if agentMode {
		t.ConversationID = ""
	}
	d := runTurn(context.Background(), rs.runner, t, agentclient.NewStreamState(), continuation.Hooks{OnActivity: func(p continuation.Activity) {
		mu.Lock()
		phases = append(phases, p)
		mu.Unlock()
	}})
	return d, phases
}

func hasPhase(ps []continuation.Activity, p string) bool {
	for _, q := range ps {
		if string(q) == p {
			return true
		}
	}
	return false
}

const deployBody = `{"errorCode": "cloud_api_shutting_down", "message": "Letta Cloud is deploying; retry shortly", "admitted": false, "retryable": true}`

// A deploy's 503 says the message was not admitted: the turn is refused
// (to be sent again after Retry-After), without any history search and
// without a second send in this attempt.
func TestDeploy503IsNotAdmittedWithoutSearch(t *testing.T) {
	for _, agentMode := range []bool{false, true} {
		rs := newRefusalServer(t, http.StatusServiceUnavailable, "2", deployBody, false)
		d, phases := rs.run(agentMode)
		if d.Outcome.String() != "refused" || d.Lookups != 0 || rs.lookups.Load() != 0 || rs.sends.Load() != 1 ||
			!strings.HasPrefix(d.Reason, "not admitted (the server said so)") || agentclient.RetryAfter(d.Err).Seconds() != 2 ||
			!hasPhase(phases, "letta_deploying") {
			t.Fatalf("agent mode %v: decision %+v, sends %d, lookups %d, phases %v", agentMode, d, rs.sends.Load(), rs.lookups.Load(), phases)
		}
	}
}

// A 503 without that body keeps today's handling: look for the otid first.
func TestPlain503StillSearches(t *testing.T) {
	rs := newRefusalServer(t, http.StatusServiceUnavailable, "", `{"detail": "Service Unavailable"}`, false)
	d, _ := rs.run(false)
	if rs.lookups.Load() == 0 || d.Outcome == continuation.Refused {
		t.Fatalf("decision %+v, lookups %d", d, rs.lookups.Load())
	}
}

// Letta's own API rate limit refused the send: not admitted, sent again
// after Retry-After, no search; the phase says rate limited.
func TestAPIRateLimitIsNotAdmittedWithoutSearch(t *testing.T) {
	rs := newRefusalServer(t, http.StatusTooManyRequests, "5", `{"detail": "RATE_LIMIT_EXCEEDED: too many requests"}`, false)
	d, phases := rs.run(false)
	if d.Outcome.String() != "refused" || rs.lookups.Load() != 0 || rs.sends.Load() != 1 || !hasPhase(phases, "rate_limited") {
		t.Fatalf("decision %+v, sends %d, lookups %d, phases %v", d, rs.sends.Load(), rs.lookups.Load(), phases)
	}
}

// A quota or credits 429 ends the turn at once, naming the cause in the
// user's words.
func TestQuota429IsRejectedNamingTheCause(t *testing.T) {
	for body, cause := range map[string]string{
		`{"detail": "not-enough-credits"}`:                    "the Letta account is out of credits",
		`{"errorCode": "agents-limit-exceeded"}`:              "the Letta account has reached its limit on the number of agents",
		`{"detail": "exceeded-quota: monthly quota"}`:         "the Letta account has used up its quota",
		`{"detail": "Premium model: premium-usage-exceeded"}`: "the Letta account has used up its premium usage",
	} {
		rs := newRefusalServer(t, http.StatusTooManyRequests, "", body, false)
		d, _ := rs.run(false)
		if d.Outcome != continuation.Rejected || d.Retryable || !strings.HasPrefix(d.Reason, cause) || rs.sends.Load() != 1 || rs.lookups.Load() != 0 {
			t.Fatalf("%s: decision %+v, sends %d, lookups %d", body, d, rs.sends.Load(), rs.lookups.Load())
		}
	}
}

// The model's rate limit: the otid is looked for (the run may have
// started), and when it is not there the gate does not send again at
// once: the turn backs off (the next attempt sends).
func TestModelRateLimitBacksOff(t *testing.T) {
	rs := newRefusalServer(t, http.StatusTooManyRequests, "", `{"error": {"type": "llm_rate_limit", "message": "Rate limited by the model provider", "detail": "429"}}`, false)
	d, phases := rs.run(false)
	if d.Outcome != continuation.NotAdmitted || rs.sends.Load() != 1 || rs.lookups.Load() == 0 || d.Resend != "" ||
		!hasPhase(phases, "rate_limited") || !strings.Contains(d.Reason, "llm_rate_limit") {
		t.Fatalf("decision %+v, sends %d, lookups %d, phases %v", d, rs.sends.Load(), rs.lookups.Load(), phases)
	}
}

// The newer busy form names no run: the turn looks for its otid in the
// thread's history; found, the run holding the thread is its own and is
// followed to its answer, with no second send.
func TestNewerBusyFormFindsOwnRunByOtid(t *testing.T) {
	for _, body := range []string{
		`{"error": "Conversation is busy with another active run."}`,
		`{"error": {"error": "Conversation is busy with another active run."}}`,
		// A run named in the text that cannot be read: the otid decides.
		`{"error": {"error": "Conversation is busy with another active run (run_id=run_gone-1)."}}`,
	} {
		rs := newRefusalServer(t, http.StatusConflict, "", body, true)
		d, _ := rs.run(false)
		if d.Outcome != continuation.Completed || d.RunID != fakeRun || rs.sends.Load() != 1 || rs.lookups.Load() != 1 {
			t.Fatalf("%s: decision %+v, sends %d, lookups %d", body, d, rs.sends.Load(), rs.lookups.Load())
		}
	}
}

// Not found: another run holds the thread, the turn waits (Busy).
func TestNewerBusyFormAnotherRunWaits(t *testing.T) {
	rs := newRefusalServer(t, http.StatusConflict, "", `{"error": {"error": "Conversation is busy with another active run."}}`, false)
	d, _ := rs.run(false)
	if d.Outcome != continuation.Busy || !d.Retryable || rs.sends.Load() != 1 || rs.lookups.Load() != 1 {
		t.Fatalf("decision %+v, sends %d, lookups %d", d, rs.sends.Load(), rs.lookups.Load())
	}
}

// History reads refused with 429 while the turn looks for its otid: the
// phase says rate limited, then recovering again once a read goes through.
func TestRateLimitedLookupsSayRateLimited(t *testing.T) {
	rs := newRefusalServer(t, http.StatusServiceUnavailable, "", `{"detail": "Service Unavailable"}`, false)
	rs.listRefusals.Store(2)
	_, phases := rs.run(true)
	i := slices.Index(phases, continuation.ActivityRateLimited)
	if i < 0 || !slices.Contains(phases[i:], continuation.ActivityRecovering) {
		t.Fatalf("phases %v: want rate_limited, then recovering", phases)
	}
}
