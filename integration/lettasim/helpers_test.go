package lettasim_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.uber.org/goleak"

	"github.com/lettaq/lettaq/integration/lettasim"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// --- schemas ---

const openAPIPath = "../../testdata/letta/openapi-subset.json"
const openAPIURL = "https://lettasim.test/openapi-subset.json"

var schemaSet struct {
	once sync.Once
	c    *jsonschema.Compiler
	err  error
	mu   sync.Mutex
	m    map[string]*jsonschema.Schema
}

// schema compiles components/schemas/<name> of Letta's OpenAPI document (format assertions on).
func schema(t testing.TB, name string) *jsonschema.Schema {
	t.Helper()
	schemaSet.once.Do(func() {
		f, err := os.Open(openAPIPath)
		if err != nil {
			abs, _ := filepath.Abs(openAPIPath)
			schemaSet.err = fmt.Errorf("the Letta OpenAPI subset is required for conformance tests "+
				"and was not found at %s: %v", abs, err)
			return
		}
		defer f.Close()
		doc, err := jsonschema.UnmarshalJSON(f)
		if err != nil {
			schemaSet.err = fmt.Errorf("parse %s: %v", openAPIPath, err)
			return
		}
		c := jsonschema.NewCompiler()
		c.AssertFormat()
		if err := c.AddResource(openAPIURL, doc); err != nil {
			schemaSet.err = err
			return
		}
		schemaSet.c = c
		schemaSet.m = map[string]*jsonschema.Schema{}
	})
	if schemaSet.err != nil {
		t.Fatal(schemaSet.err)
	}
	schemaSet.mu.Lock()
	defer schemaSet.mu.Unlock()
	if s, ok := schemaSet.m[name]; ok {
		return s
	}
	s, err := schemaSet.c.Compile(openAPIURL + "#/components/schemas/" + name)
	if err != nil {
		t.Fatalf("compile schema %s: %v", name, err)
	}
	schemaSet.m[name] = s
	return s
}

// conform asserts that data (one JSON value) validates against the named component schema.
func conform(t testing.TB, name string, data []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("%s: not JSON: %v: %s", name, err, data)
	}
	if err := schema(t, name).Validate(v); err != nil {
		t.Errorf("%s does not conform: %v\n%s", name, err, data)
	}
}

// schemaForType maps a message_type to its component schema (the discriminator mapping).
var schemaForType = map[string]string{
	"approval_request_message":  "ApprovalRequestMessage",
	"approval_response_message": "ApprovalResponseMessage",
	"assistant_message":         "AssistantMessage",
	"error_message":             "LettaErrorMessage",
	"hidden_reasoning_message":  "HiddenReasoningMessage",
	"ping":                      "LettaPing",
	"reasoning_message":         "ReasoningMessage",
	"stop_reason":               "LettaStopReason",
	"system_message":            "SystemMessage",
	"tool_call_message":         "ToolCallMessage",
	"tool_return_message":       "ToolReturnMessage",
	"usage_statistics":          "LettaUsageStatistics",
	"user_message":              "UserMessage",
}

// conformEvent validates one SSE payload: against LettaStreamingResponse (its oneOf matches
// exactly one branch because every branch pins message_type with const) and against the schema
// its message_type selects. The INTERNAL_SERVER_ERROR payload has no message_type and is outside
// the schema by design (WIRE.md): its shape is checked by hand.
func conformEvent(t testing.TB, ev event) {
	t.Helper()
	if ev.Data == "[DONE]" {
		return
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(ev.Data), &m); err != nil {
		t.Fatalf("event data is not JSON: %v: %q", err, ev.Data)
	}
	mt, _ := m["message_type"].(string)
	if mt == "" {
		if ev.Name != "error" || m["code"] != "INTERNAL_SERVER_ERROR" || len(m) != 2 {
			t.Errorf("payload without message_type must be the INTERNAL_SERVER_ERROR error event: %s %q", ev.Name, ev.Data)
		}
		if s, ok := m["error"].(string); !ok || s == "" {
			t.Errorf("INTERNAL_SERVER_ERROR event needs an error string: %q", ev.Data)
		}
		return
	}
	conform(t, "LettaStreamingResponse", []byte(ev.Data))
	name, ok := schemaForType[mt]
	if !ok {
		t.Fatalf("unexpected message_type %q", mt)
	}
	conform(t, name, []byte(ev.Data))
}

// conformMessages validates a list response: a bare JSON array of LettaMessageUnion.
func conformMessages(t testing.TB, data []byte) []map[string]any {
	t.Helper()
	var items []json.RawMessage
	if err := json.Unmarshal(data, &items); err != nil {
		t.Fatalf("list is not a JSON array: %v: %s", err, data)
	}
	out := make([]map[string]any, 0, len(items))
	for _, it := range items {
		conform(t, "LettaMessageUnion", it)
		var m map[string]any
		_ = json.Unmarshal(it, &m)
		out = append(out, m)
	}
	return out
}

// detail asserts an error body {"detail": "<text>"} and returns the text.
func detail(t testing.TB, data []byte) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("error body is not JSON: %v: %s", err, data)
	}
	s, ok := m["detail"].(string)
	if !ok || len(m) != 1 {
		t.Fatalf(`error body must be {"detail": "<text>"}: %s`, data)
	}
	return s
}

// --- server and HTTP ---

func newServer(t testing.TB, cfg lettasim.Config) *lettasim.Server {
	t.Helper()
	if cfg.TimeScale == 0 {
		cfg.TimeScale = 0.001
	}
	if cfg.Logf == nil {
		cfg.Logf = func(format string, args ...any) { t.Logf(format, args...) }
	}
	srv := lettasim.NewServer(cfg)
	t.Cleanup(srv.Close)
	return srv
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type turnReq struct {
	Text         string
	Otid         string
	Background   bool
	StreamTokens bool
	NoPings      bool
	Parts        bool // send content as a list of text parts
	// Approvals, when set, sends an approval message with these items instead of a user
	// message (Text is unused).
	Approvals []any
	Images    []any // image parts appended to the content (a list of parts then)
	Extra     map[string]any
}

func (tr turnReq) body() map[string]any {
	var content any = tr.Text
	if tr.Parts {
		content = []map[string]any{{"type": "text", "text": tr.Text}}
	}
	if len(tr.Images) > 0 {
		content = append([]any{map[string]any{"type": "text", "text": tr.Text}}, tr.Images...)
	}
	msg := map[string]any{"type": "message", "role": "user", "content": content, "sender_id": "user-test"}
	if tr.Approvals != nil {
		msg = map[string]any{"type": "approval", "approvals": tr.Approvals}
	}
	if tr.Otid != "" {
		msg["otid"] = tr.Otid
	}
	b := map[string]any{"messages": []any{msg}}
	if tr.Background {
		b["background"] = true
	}
	if tr.StreamTokens {
		b["stream_tokens"] = true
	}
	if tr.NoPings {
		b["include_pings"] = false
	}
	for k, v := range tr.Extra {
		b[k] = v
	}
	return b
}

func do(t testing.TB, srv *lettasim.Server, method, path string, body any, hdr map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(testCtx(t), method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp
}

// call does a request and reads the whole body.
func call(t testing.TB, srv *lettasim.Server, method, path string, body any) (int, http.Header, []byte) {
	t.Helper()
	resp := do(t, srv, method, path, body, nil)
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp.StatusCode, resp.Header, data
}

func getJSON(t testing.TB, srv *lettasim.Server, path string, v any) []byte {
	t.Helper()
	st, _, data := call(t, srv, "GET", path, nil)
	if st != 200 {
		t.Fatalf("GET %s: %d %s", path, st, data)
	}
	if v != nil {
		if err := json.Unmarshal(data, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, data)
		}
	}
	return data
}

// --- SSE ---

type event struct {
	Name string // "" or "error"
	Data string
	m    map[string]any
}

func (e event) field(k string) any {
	if e.m == nil {
		_ = json.Unmarshal([]byte(e.Data), &e.m)
	}
	return e.m[k]
}

func (e event) str(k string) string { s, _ := e.field(k).(string); return s }

func (e event) typ() string {
	if e.Data == "[DONE]" {
		return "[DONE]"
	}
	if e.Name == "error" {
		if mt := e.str("message_type"); mt != "" {
			return "error:" + mt
		}
		return "error:" + e.str("code")
	}
	return e.str("message_type")
}

// seq returns seq_id, or -1 when null or absent.
func (e event) seq() int {
	f, ok := e.field("seq_id").(float64)
	if !ok {
		return -1
	}
	return int(f)
}

// sseReader reads SSE events strictly in Letta's framing: optional "event: <name>" line, one
// "data: <payload>" line, a blank line. Anything else fails the test.
type sseReader struct {
	t  testing.TB
	br *bufio.Reader
}

func newSSE(t testing.TB, r io.Reader) *sseReader { return &sseReader{t: t, br: bufio.NewReader(r)} }

var errTornEvent = errors.New("stream cut in the middle of an event")

// next returns the next event; io.EOF at a clean end, another error if cut.
func (s *sseReader) next() (event, error) {
	s.t.Helper()
	var ev event
	line, err := s.br.ReadString('\n')
	if err != nil {
		if err == io.EOF && line == "" {
			return ev, io.EOF
		}
		if line == "" {
			return ev, err
		}
		return ev, errTornEvent
	}
	if name, ok := strings.CutPrefix(line, "event: "); ok {
		ev.Name = strings.TrimSuffix(name, "\n")
		if line, err = s.br.ReadString('\n'); err != nil {
			return ev, errTornEvent
		}
	}
	data, ok := strings.CutPrefix(line, "data: ")
	if !ok {
		s.t.Fatalf("SSE framing: expected a data: line, got %q", line)
	}
	ev.Data = strings.TrimSuffix(data, "\n")
	blank, err := s.br.ReadString('\n')
	if err != nil {
		return ev, errTornEvent
	}
	if blank != "\n" {
		s.t.Fatalf("SSE framing: expected a blank line after data, got %q", blank)
	}
	if ev.Data != "[DONE]" {
		if err := json.Unmarshal([]byte(ev.Data), &ev.m); err != nil {
			s.t.Fatalf("SSE data is not one compact JSON object: %q", ev.Data)
		}
	}
	return ev, nil
}

// all reads to the end; err is nil at a clean EOF.
func (s *sseReader) all() ([]event, error) {
	s.t.Helper()
	var out []event
	for {
		ev, err := s.next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

// streamTurn posts a turn to /messages/stream and reads the whole stream.
func streamTurn(t testing.TB, srv *lettasim.Server, agentID string, tr turnReq) (*http.Response, []event, error) {
	t.Helper()
	resp := do(t, srv, "POST", "/v1/agents/"+agentID+"/messages/stream", tr.body(), nil)
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		data, _ := io.ReadAll(resp.Body)
		t.Fatalf("stream: status %d: %s", resp.StatusCode, data)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Fatalf("stream content type %q", ct)
	}
	evs, err := newSSE(t, resp.Body).all()
	return resp, evs, err
}

func types(evs []event) []string {
	out := make([]string, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.typ())
	}
	return out
}

// withoutPings drops ping events.
func withoutPings(evs []event) []event {
	var out []event
	for _, e := range evs {
		if e.typ() != "ping" {
			out = append(out, e)
		}
	}
	return out
}

func eqStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
