package lettasim_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/lettaq/lettaq/integration/lettasim"
)

// Letta Cloud's refusals (WIRE.md, "Errors Letta Cloud returns today"), one fault mode each:
// the bodies and headers they answer, and that none stores anything.
func TestCloudRefusalFaults(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("cloud", nil)
	path := "/v1/agents/" + agent + "/messages/stream"
	for _, tc := range []struct {
		name       string
		f          lettasim.Fault
		status     int
		retryAfter string
		body       string
	}{
		{"deploy", lettasim.Fault{Deploy503: true, RetryAfter: 4000 * time.Second}, 503, "4",
			`{"errorCode":"cloud_api_shutting_down","message":"Letta Cloud is deploying: the request was not admitted, retry after the Retry-After delay","admitted":false,"retryable":true}`},
		{"api rate limit", lettasim.Fault{Status429Code: "rate_limit", RetryAfter: 2000 * time.Second}, 429, "2", `{"detail":"RATE_LIMIT_EXCEEDED: simulated rate limit, retry later"}`},
		{"model rate limit", lettasim.Fault{Status429Code: "llm_rate_limit"}, 429, "",
			`{"error":{"type":"llm_rate_limit","message":"Rate limited by the model provider","detail":"simulated: the model provider answered 429"}}`},
		{"credits", lettasim.Fault{Status429Code: "not-enough-credits"}, 429, "", `{"errorCode":"not-enough-credits","detail":"not-enough-credits: simulated account limit"}`},
	} {
		srv.SetFault(agent, tc.f)
		st, hdr, data := call(t, srv, "POST", path, turnReq{Text: "x", Otid: "otid-cloud"}.body())
		if st != tc.status || hdr.Get("Retry-After") != tc.retryAfter || string(data) != tc.body || !json.Valid(data) {
			t.Fatalf("%s: %d Retry-After %q %s", tc.name, st, hdr.Get("Retry-After"), data)
		}
	}
	// The same by directive (each a first attempt of its otid: a directive's fault applies to
	// the first, times=1).
	for i, d := range []struct {
		text string
		want int
	}{
		{"[[sim deploy_503]] x", 503},
		{"[[sim limit_429=exceeded-quota]] x", 429},
		{"[[sim limit_429=llm_rate_limit]] x", 429},
		{"[[sim status=429 retry_after=2000s]] x", 429},
	} {
		otid := "otid-directive-" + string(rune('a'+i))
		if st, _, data := call(t, srv, "POST", path, turnReq{Text: d.text, Otid: otid}.body()); st != d.want || srv.CountOtid(otid) != 0 {
			t.Fatalf("%s: %d %s", d.text, st, data)
		}
	}
	if srv.CountOtid("otid-cloud") != 0 || len(srv.Runs(agent)) != 0 {
		t.Fatal("a refusal stored something")
	}
}

// The newer busy forms, and a busy answer to a send whose own run holds the thread.
func TestNewerBusyFormsAndBusyAfterStore(t *testing.T) {
	srv := newServer(t, lettasim.Config{})
	agent := srv.CreateAgent("busy-newer", nil)
	conv := srv.CreateConversation(agent, "")
	for form, want := range map[string]string{
		"newer":  `{"error":"Conversation is busy with another active run."}`,
		"nested": `{"error":{"error":"Conversation is busy with another active run."}}`,
	} {
		srv.SetFault(agent, lettasim.Fault{Busy: true, BusyForm: form})
		if st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "x", Otid: "otid-busy"}.body()); st != 409 || string(data) != want {
			t.Fatalf("%s: %d %s", form, st, data)
		}
		if st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "[[sim busy=true busy_form=" + form + "]] x", Otid: "otid-busy-" + form}.body()); st != 409 || string(data) != want {
			t.Fatalf("directive %s: %d %s", form, st, data)
		}
	}
	if srv.CountOtid("otid-busy")+srv.CountOtid("otid-busy-newer")+srv.CountOtid("otid-busy-nested") != 0 {
		t.Fatal("busy stored a message")
	}
	srv.SetFault(agent, lettasim.Fault{BusyAfterStore: true, BusyForm: "nested"})
	st, _, data := call(t, srv, "POST", convPath(conv), turnReq{Text: "x", Otid: "otid-own"}.body())
	if st != 409 || string(data) != `{"error":{"error":"Conversation is busy with another active run."}}` {
		t.Fatalf("busy after store: %d %s", st, data)
	}
	rec, err := srv.WaitOtid(testCtx(t), "otid-own")
	if err != nil || rec.RunID == "" || srv.CountOtid("otid-own") != 1 {
		t.Fatalf("busy after store: message %+v (%v), count %d", rec, err, srv.CountOtid("otid-own"))
	}
}
