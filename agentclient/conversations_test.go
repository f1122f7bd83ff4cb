package agentclient

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Letta's OpenAPI subset, kept in the repository (testdata/letta/README.md says where it comes from).
const openAPIPath = "../testdata/letta/openapi-subset.json"
const openAPIURL = "https://letta.test/openapi-subset.json"

var schemas struct {
	once sync.Once
	c    *jsonschema.Compiler
	err  error
}

// checkSchema validates body (JSON) against components/schemas/<name>.
func checkSchema(t *testing.T, name string, body []byte) {
	t.Helper()
	schemas.once.Do(func() {
		f, err := os.Open(openAPIPath)
		if err != nil {
			abs, _ := filepath.Abs(openAPIPath)
			schemas.err = fmt.Errorf("the Letta OpenAPI subset is required and was not found at %s: %v", abs, err)
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemas.err = err
			return
		}
		c := jsonschema.NewCompiler()
		if err := c.AddResource(openAPIURL, doc); err != nil {
			schemas.err = err
			return
		}
		schemas.c = c
	})
	if schemas.err != nil {
		t.Fatal(schemas.err)
	}
	s, err := schemas.c.Compile(openAPIURL + "#/components/schemas/" + name)
	if err != nil {
		t.Fatalf("compile %s: %v", name, err)
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, body)
	}
	if err := s.Validate(v); err != nil {
		t.Errorf("%s does not conform: %v\n%s", name, err, body)
	}
}

// The path patterns of the conversation endpoints (from the schema).
var (
	convPathID = regexp.MustCompile(`^(default|conv-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}|agent-[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12})$`)
)

const (
	testAgent = "agent-0b3a8f0e-6c1d-4f6e-9a51-3c2a1d9e7b40"
	testConv  = "conv-5d7e2c11-8a4b-4c3d-b2e1-9f0a6b7c8d9e"
	testRun   = "run-1f2e3d4c-5b6a-4789-8abc-def012345678"
	testOtid  = "7c9e6679-7425-40de-944b-e07fc1f90ae7"
)

type captured struct {
	method, path string
	query        map[string][]string
	body         []byte
}

// convServer records every request and answers with h.
func convServer(t *testing.T, h func(w http.ResponseWriter, r *http.Request, body []byte)) (*Client, *[]captured) {
	t.Helper()
	var mu sync.Mutex
	var got []captured
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, captured{r.Method, r.URL.Path, r.URL.Query(), b})
		mu.Unlock()
		h(w, r, b)
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{BaseURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return c, &got
}

const sseTurn = `data: {"message_type":"ping","id":"ping-1","run_id":"` + testRun + `","seq_id":0}

data: {"id":"message-1","date":"2026-01-01T00:00:00+00:00","message_type":"assistant_message","otid":null,"content":"hi","seq_id":1,"run_id":"` + testRun + `"}

data: {"message_type":"stop_reason","stop_reason":"end_turn"}

data: [DONE]

`

func writeSSE(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	_, _ = io.WriteString(w, sseTurn)
}

func TestConversationSendBodyConformsAndStreams(t *testing.T) {
	for _, tc := range []struct {
		name, conv string
		wantAgent  bool
	}{
		{"conv", testConv, false},
		{"default", DefaultConversation, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, got := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) { writeSSE(w) })
			st := NewStreamState()
			err := c.SendStream(context.Background(), SendRequest{AgentID: testAgent, ConversationID: tc.conv,
				Text: "hello", Otid: testOtid, Background: true}, st, StreamOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if st.RunID() != testRun || st.Answer() != "hi" || st.StopReason() != "end_turn" {
				t.Fatalf("state: run %q answer %q stop %q", st.RunID(), st.Answer(), st.StopReason())
			}
			r := (*got)[0]
			if r.method != http.MethodPost || r.path != "/v1/conversations/"+tc.conv+"/messages" {
				t.Fatalf("request %s %s", r.method, r.path)
			}
			if !convPathID.MatchString(strings.Split(r.path, "/")[3]) {
				t.Errorf("path id does not match the schema's pattern: %s", r.path)
			}
			checkSchema(t, "ConversationMessageRequest", r.body)
			for _, want := range []string{`"background":true`, `"streaming":true`, `"include_pings":true`, `"otid":"` + testOtid + `"`} {
				if !bytes.Contains(r.body, []byte(want)) {
					t.Errorf("body lacks %s: %s", want, r.body)
				}
			}
			if has := bytes.Contains(r.body, []byte(`"agent_id":"`+testAgent+`"`)); has != tc.wantAgent {
				t.Errorf("agent_id in body = %v, want %v: %s", has, tc.wantAgent, r.body)
			}
		})
	}
}

func TestConversationSendRefusesBadIDs(t *testing.T) {
	c, got := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) { writeSSE(w) })
	for _, id := range []string{"conv-demo", "CONV-5D7E2C11-8A4B-4C3D-B2E1-9F0A6B7C8D9E", "conv-5d7e2c11-8a4b-1c3d-b2e1-9f0a6b7c8d9e", "../x"} {
		err := c.SendStream(context.Background(), SendRequest{AgentID: testAgent, ConversationID: id, Text: "x", Otid: testOtid},
			NewStreamState(), StreamOptions{})
		if err == nil || !strings.Contains(err.Error(), "conversation id") {
			t.Errorf("%q: err %v, want a conversation id error", id, err)
		}
	}
	if len(*got) != 0 {
		t.Errorf("%d requests sent for invalid ids", len(*got))
	}
}

func TestResumeConversationStreamBodies(t *testing.T) {
	c, got := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) { writeSSE(w) })
	ctx := context.Background()
	reqs := []ConversationResumeRequest{
		{ConversationID: testConv, RunID: testRun, StartingAfter: 7},
		{ConversationID: testConv, Otid: testOtid},
		{ConversationID: testConv},
		{ConversationID: DefaultConversation, AgentID: testAgent, Otid: testOtid},
	}
	for i, rq := range reqs {
		st := NewStreamState()
		if err := c.ResumeConversationStream(ctx, rq, st, StreamOptions{}); err != nil {
			t.Fatalf("resume %d: %v", i, err)
		}
		if st.RunID() != testRun {
			t.Errorf("resume %d: run id %q (the first ping names it)", i, st.RunID())
		}
	}
	if err := c.ResumeConversationStream(ctx, ConversationResumeRequest{ConversationID: DefaultConversation}, NewStreamState(), StreamOptions{}); err == nil {
		t.Error("default conversation without agent id accepted")
	}
	wants := []string{`"run_id":"` + testRun + `"`, `"otid":"` + testOtid + `"`, `"starting_after":0`, `"agent_id":"` + testAgent + `"`}
	for i, r := range *got {
		if r.path != "/v1/conversations/"+reqs[i].ConversationID+"/stream" {
			t.Errorf("resume %d: path %s", i, r.path)
		}
		checkSchema(t, "RetrieveStreamRequest", r.body)
		if !bytes.Contains(r.body, []byte(wants[i])) {
			t.Errorf("resume %d: body lacks %s: %s", i, wants[i], r.body)
		}
	}
	if !bytes.Contains((*got)[0].body, []byte(`"starting_after":7`)) {
		t.Errorf("starting_after not sent: %s", (*got)[0].body)
	}
	if bytes.Contains((*got)[2].body, []byte(`"run_id"`)) || bytes.Contains((*got)[2].body, []byte(`"otid"`)) {
		t.Errorf("newest-active resume names a run or otid: %s", (*got)[2].body)
	}
}

func TestConversationCRUD(t *testing.T) {
	conv := `{"id":"` + testConv + `","agent_id":"` + testAgent + `","summary":"lettaq:abc","created_at":"2026-01-01T00:00:00Z","last_message_at":null}`
	c, got := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == "/v1/conversations/":
			_, _ = io.WriteString(w, conv)
		case r.Method == http.MethodGet && r.URL.Path == "/v1/conversations/":
			_, _ = io.WriteString(w, "["+conv+"]")
		case r.Method == http.MethodGet && r.URL.Path == "/v1/conversations/"+testConv:
			_, _ = io.WriteString(w, conv)
		case strings.HasSuffix(r.URL.Path, "/messages"):
			_, _ = io.WriteString(w, `[{"id":"message-1","date":"2026-01-01T00:00:00+00:00","message_type":"user_message","otid":"`+testOtid+`","content":"hello","run_id":"`+testRun+`"}]`)
		case strings.HasSuffix(r.URL.Path, "/cancel"):
			_, _ = io.WriteString(w, `{"`+testRun+`":"cancelled"}`)
		default:
			http.NotFound(w, r)
		}
	})
	ctx := context.Background()
	cv, err := c.CreateConversation(ctx, testAgent, CreateConversationRequest{Summary: "lettaq:abc"})
	if err != nil || cv.ID != testConv || cv.Summary != "lettaq:abc" || cv.AgentID != testAgent {
		t.Fatalf("create: %+v %v", cv, err)
	}
	list, err := c.ListConversations(ctx, ListConversationsOptions{AgentID: testAgent, SummarySearch: "lettaq:abc", Limit: 5, After: testConv, Order: "asc"})
	if err != nil || len(list) != 1 || list[0].ID != testConv {
		t.Fatalf("list: %v %v", list, err)
	}
	if g, err := c.GetConversation(ctx, testConv); err != nil || g.ID != testConv {
		t.Fatalf("get: %v %v", g, err)
	}
	if _, err := c.GetConversation(ctx, DefaultConversation); err == nil {
		t.Error("get of the default conversation accepted (it is no object)")
	}
	msgs, err := c.ListConversationMessages(ctx, DefaultConversation, testAgent, ListOptions{After: "message-0", Limit: 10, Order: "desc"})
	if err != nil || len(msgs) != 1 || msgs[0].(*UserMessage).Otid != testOtid {
		t.Fatalf("messages: %v %v", msgs, err)
	}
	if _, err := c.ListConversationMessages(ctx, DefaultConversation, "", ListOptions{}); err == nil {
		t.Error("default conversation messages without agent id accepted")
	}
	out, err := c.CancelConversation(ctx, testConv, "")
	if err != nil || out[testRun] != "cancelled" {
		t.Fatalf("cancel: %v %v", out, err)
	}
	r := *got
	checkSchema(t, "CreateConversation", r[0].body)
	if r[0].query["agent_id"][0] != testAgent {
		t.Errorf("create query %v", r[0].query)
	}
	q := r[1].query
	if q["summary_search"][0] != "lettaq:abc" || q["limit"][0] != "5" || q["after"][0] != testConv || q["order"][0] != "asc" || q["agent_id"][0] != testAgent {
		t.Errorf("list query %v", q)
	}
	q = r[3].query
	if r[3].path != "/v1/conversations/default/messages" || q["agent_id"][0] != testAgent || q["after"][0] != "message-0" || q["limit"][0] != "10" {
		t.Errorf("messages request %s %v", r[3].path, q)
	}
	if r[4].path != "/v1/conversations/"+testConv+"/cancel" {
		t.Errorf("cancel path %s", r[4].path)
	}
}

// The 409 bodies Letta sends, in the forms WIRE.md records.
var conflictBodies = []struct {
	name, body string
	retryAfter string
	want       Conflict
	runID      string
	class      Class
}{
	{"busy, open-source form", `{"detail": "CONFLICT: Cannot send a new message: Another request (run_id=` + testRun + `) is currently being processed for this conversation. Please wait for it to complete.", "run_id": "` + testRun + `"}`,
		"", ConflictBusy, testRun, Retryable},
	{"busy, open-source form without run_id field", `{"detail": "CONFLICT: Cannot send a new message: Another request (run_id=` + testRun + `) is currently being processed for this conversation. Please wait for it to complete."}`,
		"", ConflictBusy, testRun, Retryable},
	{"busy, hosted form", `{"error": "Conversation ` + testConv + ` is busy with another active run."}`,
		"", ConflictBusy, "", Retryable},
	{"busy, hosted form, object", `{"error": {"type": "conflict", "message": "Conversation ` + testConv + ` is busy with another active run.", "run_id": "x"}, "run_id": "` + testRun + `"}`,
		"", ConflictBusy, testRun, Retryable},
	{"busy, newer form", `{"error": "Conversation is busy with another active run."}`,
		"", ConflictBusy, "", Retryable},
	{"busy, newer form, nested", `{"error": {"error": "Conversation is busy with another active run."}}`,
		"", ConflictBusy, "", Retryable},
	{"busy, newer form, run_id= in the text", `{"error": {"error": "Conversation is busy with another active run (run_id=run_7Hx-2b)."}}`,
		"", ConflictBusy, "run_7Hx-2b", Retryable},
	{"pending approval", `{"detail": "CONFLICT: Cannot send a new message: The agent is waiting for approval on a tool call. Please approve or deny the pending request before continuing."}`,
		"", ConflictPendingApproval, "", Permanent},
	{"pending approval, code", `{"detail": {"code": "PENDING_APPROVAL", "message": "Cannot send a new message", "pending_request_id": "message-1"}}`,
		"", ConflictPendingApproval, "", Permanent},
	{"nothing to cancel", `{"detail": "NO_ACTIVE_RUNS_TO_CANCEL: nothing is running"}`, "", ConflictOther, "", Permanent},
	{"db lock", `{"detail": "database is locked"}`, "1", ConflictOther, "", Retryable},
}

func TestConflictClassification(t *testing.T) {
	for _, tc := range conflictBodies {
		t.Run(tc.name, func(t *testing.T) {
			c, _ := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
				if tc.retryAfter != "" {
					w.Header().Set("Retry-After", tc.retryAfter)
				}
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusConflict)
				_, _ = io.WriteString(w, tc.body)
			})
			err := c.SendStream(context.Background(), SendRequest{AgentID: testAgent, ConversationID: testConv, Text: "x", Otid: testOtid},
				NewStreamState(), StreamOptions{})
			if err == nil {
				t.Fatal("no error")
			}
			var ae *Error
			if !asError(err, &ae) || ae.Conflict() != tc.want {
				t.Fatalf("conflict %v, want %v (%v)", ae.Conflict(), tc.want, err)
			}
			if IsBusy(err) != (tc.want == ConflictBusy) || IsPendingApproval(err) != (tc.want == ConflictPendingApproval) {
				t.Errorf("IsBusy %v IsPendingApproval %v for %v", IsBusy(err), IsPendingApproval(err), tc.want)
			}
			if got := BusyRunID(err); got != tc.runID {
				t.Errorf("BusyRunID %q, want %q", got, tc.runID)
			}
			if got := Classify(err); got != tc.class {
				t.Errorf("Classify %v, want %v", got, tc.class)
			}
		})
	}
}

func asError(err error, ae **Error) bool {
	e, ok := err.(*Error)
	if ok {
		*ae = e
	}
	return ok
}

func TestConflictOnlyFor409(t *testing.T) {
	if got := conflictOf(http.StatusBadRequest, "is currently being processed"); got != ConflictNone {
		t.Errorf("400 classified %v", got)
	}
	if IsBusy(&Error{StatusCode: 500, Detail: "conversation busy"}) || IsPendingApproval(fmt.Errorf("wrapped: %w", &Error{StatusCode: 400, Detail: "waiting for approval"})) {
		t.Error("non-409 classified as a conflict")
	}
	if !IsBusy(fmt.Errorf("wrapped: %w", &Error{StatusCode: 409, Detail: "Conversation x is busy with another active run."})) {
		t.Error("wrapped busy not seen")
	}
}

func TestResumeGoneAndUnknownOtid(t *testing.T) {
	c, _ := convServer(t, func(w http.ResponseWriter, r *http.Request, body []byte) {
		if bytes.Contains(body, []byte(`"otid"`)) {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"detail":"No run found for otid=`+testOtid+`"}`)
			return
		}
		w.WriteHeader(http.StatusGone)
		_, _ = io.WriteString(w, `{"detail":"Run `+testRun+` is too old to resume"}`)
	})
	ctx := context.Background()
	err := c.ResumeConversationStream(ctx, ConversationResumeRequest{ConversationID: testConv, Otid: testOtid}, NewStreamState(), StreamOptions{})
	if !IsNotFound(err) || IsGone(err) || Classify(err) != Permanent {
		t.Errorf("unknown otid: %v (not found %v, class %v)", err, IsNotFound(err), Classify(err))
	}
	err = c.ResumeConversationStream(ctx, ConversationResumeRequest{ConversationID: testConv, RunID: testRun}, NewStreamState(), StreamOptions{})
	if !IsGone(err) || Classify(err) != Permanent {
		t.Errorf("old run: %v (gone %v, class %v)", err, IsGone(err), Classify(err))
	}
}
