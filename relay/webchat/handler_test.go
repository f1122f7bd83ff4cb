package webchat

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

const agentA = "agent-11111111-2222-4333-8444-555555555555"

// fakeStream is a reply stream in memory: entries "1-0", "2-0", …
type fakeStream struct {
	mu    sync.Mutex
	evs   []record.ReplyEvent
	added chan struct{} // closed and replaced at each add
	reads chan string   // each Read's after, when not nil
}

func newFakeStream() *fakeStream { return &fakeStream{added: make(chan struct{})} }

func (s *fakeStream) add(evs ...record.ReplyEvent) {
	s.mu.Lock()
	for _, ev := range evs {
		ev.ID = fmt.Sprintf("%d-0", len(s.evs)+1)
		s.evs = append(s.evs, ev)
	}
	close(s.added)
	s.added = make(chan struct{})
	s.mu.Unlock()
}

func (s *fakeStream) Read(ctx context.Context, c record.Conversation, after string, count int64, block time.Duration) ([]record.ReplyEvent, string, error) {
	if s.reads != nil {
		s.reads <- after
	}
	deadline := time.NewTimer(block)
	defer deadline.Stop()
	for {
		s.mu.Lock()
		var out []record.ReplyEvent
		for _, ev := range s.evs {
			if idLess(after, ev.ID) {
				out = append(out, ev)
			}
		}
		wait := s.added
		s.mu.Unlock()
		if len(out) > 0 {
			return out, out[len(out)-1].ID, nil
		}
		select {
		case <-ctx.Done():
			return nil, after, ctx.Err()
		case <-deadline.C:
			return nil, after, nil
		case <-wait:
		}
	}
}

type fakeQueue struct {
	mu       sync.Mutex
	order    []string
	enqueued []queue.Message
	answers  []queue.ApprovalReply
	cancels  []queue.CancelRequest
	err      error
}

func (q *fakeQueue) Enqueue(_ context.Context, m queue.Message) (queue.EnqueueResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.order = append(q.order, "enqueue")
	q.enqueued = append(q.enqueued, m)
	return queue.EnqueueResult{TaskID: "turn:" + m.MessageID}, q.err
}

func (q *fakeQueue) AnswerApproval(_ context.Context, r queue.ApprovalReply) (queue.EnqueueResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.answers = append(q.answers, r)
	return queue.EnqueueResult{TaskID: "answer"}, q.err
}

func (q *fakeQueue) Cancel(_ context.Context, r queue.CancelRequest) (queue.CancelResult, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.cancels = append(q.cancels, r)
	return queue.CancelResult{}, q.err
}

type fakeSaid struct {
	q *fakeQueue
	m map[string]Said1
}

func (s *fakeSaid) Put(_ context.Context, c record.Conversation, id string, v Said1) error {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	s.q.order = append(s.q.order, "said")
	s.m[c.String()+"/"+id] = v
	return nil
}

func (s *fakeSaid) Get(_ context.Context, c record.Conversation, ids []string) (map[string]Said1, error) {
	s.q.mu.Lock()
	defer s.q.mu.Unlock()
	out := map[string]Said1{}
	for _, id := range ids {
		if v, ok := s.m[c.String()+"/"+id]; ok {
			out[id] = v
		}
	}
	return out, nil
}

type fixture struct {
	srv    *httptest.Server
	stream *fakeStream
	q      *fakeQueue
	said   *fakeSaid
}

func newFixture(t *testing.T, mod func(*Config)) *fixture {
	t.Helper()
	f := &fixture{stream: newFakeStream(), q: &fakeQueue{}}
	f.said = &fakeSaid{q: f.q, m: map[string]Said1{}}
	cfg := Config{Enqueue: f.q, Stream: f.stream, Approvals: f.q, Cancel: f.q, Said: f.said,
		Agents: []Agent{{Name: "demo", ID: agentA}}, JournalURL: "/turns/", Block: 20 * time.Millisecond}
	if mod != nil {
		mod(&cfg)
	}
	f.srv = httptest.NewServer(http.StripPrefix("/chat", New(cfg)))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fixture) post(t *testing.T, path, body string) (int, map[string]any) {
	t.Helper()
	resp, err := http.Post(f.srv.URL+"/chat/"+path, "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

// sse is an open event stream.
type sse struct {
	resp *http.Response
	r    *bufio.Reader
}

func (f *fixture) events(t *testing.T, ctx context.Context, query, lastID string) *sse {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", f.srv.URL+"/chat/events?"+query, nil)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	return &sse{resp: resp, r: bufio.NewReader(resp.Body)}
}

// next returns the next message: its id and data, or a comment (id "", data the comment).
func (s *sse) next(t *testing.T) (id string, data sseEvent, comment string) {
	t.Helper()
	for {
		var lines []string
		for {
			line, err := s.r.ReadString('\n')
			if err != nil {
				t.Fatalf("event stream ended: %v", err)
			}
			line = strings.TrimRight(line, "\n")
			if line == "" {
				break
			}
			lines = append(lines, line)
		}
		for _, l := range lines {
			switch {
			case strings.HasPrefix(l, ": "):
				return "", sseEvent{}, l[2:]
			case strings.HasPrefix(l, "id: "):
				id = l[4:]
			case strings.HasPrefix(l, "data: "):
				if err := json.Unmarshal([]byte(l[6:]), &data); err != nil {
					t.Fatalf("data %q: %v", l, err)
				}
			}
		}
		if id != "" {
			return id, data, ""
		}
	}
}

func ev(typ record.EventType, seq int64) record.ReplyEvent {
	return record.ReplyEvent{Type: typ, TaskID: "turn:m1", MessageID: "m1", Seq: seq, Text: fmt.Sprintf("e%d", seq)}
}

// A stream read from Last-Event-ID (a reconnect), from ?after= or from its start gives each
// entry once, in order, with its entry id as the SSE id; new entries follow.
func TestEventsResumeFromTheEntryID(t *testing.T) {
	f := newFixture(t, nil)
	f.stream.add(ev(record.EventAccepted, 1), ev(record.EventPhase, 2), ev(record.EventAnswerDelta, 3), ev(record.EventAnswerDelta, 4))
	for _, tc := range []struct {
		name, query, lastID string
		want                []string
	}{
		{"start", "chat=c1", "", []string{"1-0", "2-0", "3-0", "4-0"}},
		{"Last-Event-ID", "chat=c1", "2-0", []string{"3-0", "4-0"}},
		{"after", "chat=c1&after=3-0", "", []string{"4-0"}},
		{"Last-Event-ID over after", "chat=c1&after=1-0", "3-0", []string{"4-0"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			s := f.events(t, ctx, tc.query, tc.lastID)
			if ct := s.resp.Header.Get("Content-Type"); ct != "text/event-stream" {
				t.Fatalf("Content-Type %q", ct)
			}
			var got []string
			for len(got) < len(tc.want) {
				id, data, _ := s.next(t)
				if id == "" {
					continue
				}
				if data.Event.ID != id {
					t.Errorf("SSE id %s carries entry %s", id, data.Event.ID)
				}
				got = append(got, id)
			}
			if strings.Join(got, ",") != strings.Join(tc.want, ",") {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
	// A new entry reaches an open stream.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := f.events(t, ctx, "chat=c1", "4-0")
	f.stream.add(ev(record.EventAnswer, 5))
	for {
		id, data, _ := s.next(t)
		if id == "" {
			continue
		}
		if id != "5-0" || data.Event.Type != record.EventAnswer || data.Event.Text != "e5" {
			t.Fatalf("got %s %+v, want 5-0, the answer", id, data.Event)
		}
		break
	}
}

// The accepted event of a message sent from the page carries what the user said; no other
// event does.
func TestEventsCarryWhatTheUserSaid(t *testing.T) {
	f := newFixture(t, nil)
	if code, out := f.post(t, "send", `{"chat":"c1","agent":"demo","message_id":"m1","text":"hi there"}`); code != http.StatusAccepted {
		t.Fatalf("send: %d %v", code, out)
	}
	f.stream.add(ev(record.EventAccepted, 1), ev(record.EventAnswer, 2))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := f.events(t, ctx, "chat=c1", "")
	for n := 0; n < 2; {
		id, data, _ := s.next(t)
		if id == "" {
			continue
		}
		n++
		switch data.Event.Type {
		case record.EventAccepted:
			if data.Said == nil || data.Said.Text != "hi there" {
				t.Errorf("accepted: said %+v", data.Said)
			}
		default:
			if data.Said != nil {
				t.Errorf("%s carries said %+v", data.Event.Type, data.Said)
			}
		}
	}
}

// A quiet stream gets a comment line now and then, so that proxies keep it open.
func TestEventsHeartbeat(t *testing.T) {
	f := newFixture(t, func(c *Config) { c.Heartbeat = 30 * time.Millisecond; c.Block = 10 * time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := f.events(t, ctx, "chat=c1", "")
	if _, _, comment := s.next(t); comment != "keep-alive" {
		t.Fatalf("first message on a quiet stream: comment %q", comment)
	}
}

// The handler (and its goroutine) ends when the client goes away.
func TestEventsEndWhenTheClientGoes(t *testing.T) {
	stream := newFakeStream()
	stream.reads = make(chan string, 100)
	done := make(chan struct{}, 10)
	h := New(Config{Stream: stream, Block: 50 * time.Millisecond})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() { done <- struct{}{} }()
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		ctx, cancel := context.WithCancel(context.Background())
		req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/events?chat=c1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		<-stream.reads // the handler reads the stream
		cancel()
		resp.Body.Close()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the handler goes on after its client went away")
		}
	}
	srv.CloseClientConnections()
	http.DefaultClient.CloseIdleConnections()
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+1 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("goroutines: %d before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A resume from an id past the stream's last entry (Redis lost the stream's tail) reads the
// stream again from its start.
func TestEventsAfterALostTailReadFromTheStart(t *testing.T) {
	f := newFixture(t, nil)
	f.stream.add(ev(record.EventAccepted, 1))
	f.stream.reads = make(chan string, 100)
	tail := "1-0"
	f2 := newFixture(t, func(c *Config) {
		c.Stream = f.stream
		c.Tail = func(context.Context, record.Conversation) (string, error) { return tail, nil }
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s := f2.events(t, ctx, "chat=c1", "9-0")
	if after := <-f.stream.reads; after != "0" {
		t.Fatalf("read from %q, want 0", after)
	}
	if id, _, _ := s.next(t); id != "1-0" {
		t.Fatalf("first entry %q", id)
	}
}

func TestEventsBadInput(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct{ query, lastID, field string }{
		{"", "", "chat"},
		{"chat=c1", "not-an-id", "Last-Event-ID"},
		{"chat=c1&after=1-x", "", "Last-Event-ID"},
	} {
		req, _ := http.NewRequest("GET", f.srv.URL+"/chat/events?"+tc.query, nil)
		if tc.lastID != "" {
			req.Header.Set("Last-Event-ID", tc.lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]string
		_ = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || out["field"] != tc.field {
			t.Errorf("%q %q: %d %v, want 400 naming %s", tc.query, tc.lastID, resp.StatusCode, out, tc.field)
		}
	}
}

// A message goes in as the page sent it, with its message id (a second send of the same
// message is the same turn), integration web; what the user said is kept first.
func TestSend(t *testing.T) {
	f := newFixture(t, nil)
	code, out := f.post(t, "send", `{"chat":"c1","agent":"demo","message_id":"m1","text":"hi","images":[{"media_type":"image/png","data":"iVBORw0KGgo="}]}`)
	if code != http.StatusAccepted || out["task_id"] != "turn:m1" {
		t.Fatalf("send: %d %v", code, out)
	}
	m := f.q.enqueued[0]
	want := record.Conversation{Integration: "web", ChatID: "c1"}
	if m.AgentID != agentA || m.Conversation != want || m.MessageID != "m1" || m.Text != "hi" || m.SenderID != "web" || len(m.Images) != 1 {
		t.Errorf("enqueued %+v", m)
	}
	if strings.Join(f.q.order, ",") != "said,enqueue" {
		t.Errorf("order %v: what the user said is kept before the enqueue", f.q.order)
	}
	if f.said.m["web:c1/m1"] != (Said1{Text: "hi", Images: 1}) {
		t.Errorf("said %+v", f.said.m)
	}
	// An agent by id works as by name.
	if code, out := f.post(t, "send", `{"chat":"c1","agent":"`+agentA+`","message_id":"m2","text":"by id"}`); code != http.StatusAccepted {
		t.Errorf("by id: %d %v", code, out)
	}
}

func TestSendBadInput(t *testing.T) {
	f := newFixture(t, nil)
	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"agent":"demo","message_id":"m1","text":"hi"}`, 400, "chat"},
		{`{"chat":"c1","agent":"nobody","message_id":"m1","text":"hi"}`, 400, "agent"},
		{`{"chat":"c1","agent":"` + strings.Replace(agentA, "1", "9", 1) + `","message_id":"m1","text":"hi"}`, 400, "agent"},
		{`{"chat":"c1","agent":"demo","text":"hi"}`, 400, "message_id"},
		{`{"chat":"c1","agent":"demo","message_id":"m1","text":""}`, 400, "text"},
		{`{"chat":"c1","agent":"demo","message_id":"m1","images":[{"media_type":"text/html","data":"eA=="}]}`, 400, "images[0].media_type"},
		{`{"chat":`, 400, ""},
	} {
		code, out := f.post(t, "send", tc.body)
		if code != tc.code || (tc.field != "" && out["field"] != tc.field) || out["error"] == "" {
			t.Errorf("%s: %d %v, want %d naming %q", tc.body, code, out, tc.code, tc.field)
		}
	}
	if len(f.q.enqueued) != 0 {
		t.Errorf("bad input enqueued %v", f.q.enqueued)
	}
	// Only JSON: a form post from another site's page is not one.
	resp, err := http.Post(f.srv.URL+"/chat/send", "text/plain", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d", resp.StatusCode)
	}
	// Any agent id only when configured.
	g := newFixture(t, func(c *Config) { c.AnyAgent = true })
	other := strings.Replace(agentA, "1", "9", 1)
	if code, out := g.post(t, "send", `{"chat":"c1","agent":"`+other+`","message_id":"m1","text":"hi"}`); code != http.StatusAccepted || g.q.enqueued[0].AgentID != other {
		t.Errorf("AnyAgent: %d %v", code, out)
	}
	if code, _ := g.post(t, "send", `{"chat":"c1","agent":"not-an-id","message_id":"m1","text":"hi"}`); code != http.StatusBadRequest {
		t.Errorf("AnyAgent, not an id: %d", code)
	}
}

// An approval is answered with the message id answer:<request>, so a double press is one
// answer; an unknown request is a 404.
func TestApprove(t *testing.T) {
	f := newFixture(t, nil)
	for i := 0; i < 2; i++ {
		if code, out := f.post(t, "approve", `{"chat":"c1","request":"turn:req","approve":true}`); code != http.StatusAccepted {
			t.Fatalf("approve: %d %v", code, out)
		}
	}
	for _, a := range f.q.answers {
		if a.Request != "turn:req" || !a.Approve || a.MessageID != "answer:turn:req" {
			t.Errorf("answer %+v", a)
		}
	}
	f.q.err = fmt.Errorf("wrapped: %w", queue.ErrNoApproval)
	if code, out := f.post(t, "approve", `{"chat":"c1","request":"turn:gone","approve":false}`); code != http.StatusNotFound || out["field"] != "request" {
		t.Errorf("unknown request: %d %v", code, out)
	}
	if code, _ := f.post(t, "approve", `{"chat":"c1","approve":true}`); code != http.StatusBadRequest {
		t.Errorf("no request: %d", code)
	}
}

// Stop cancels the head of the chat's line (its running turn).
func TestStop(t *testing.T) {
	f := newFixture(t, nil)
	if code, out := f.post(t, "stop", `{"chat":"c1","agent":"demo"}`); code != http.StatusOK {
		t.Fatalf("stop: %d %v", code, out)
	}
	c := f.q.cancels[0]
	if c.Chat == nil || *c.Chat != (record.Conversation{Integration: "web", ChatID: "c1"}) || c.AgentID != agentA || c.All || c.TaskID != "" {
		t.Errorf("cancel %+v", c)
	}
	f.q.err = fmt.Errorf("x: %w", queue.ErrNotFound)
	if code, out := f.post(t, "stop", `{"chat":"c1","agent":"demo"}`); code != http.StatusNotFound || !strings.Contains(fmt.Sprint(out["error"]), "nothing is running") {
		t.Errorf("nothing running: %d %v", code, out)
	}
	f.q.err = errors.New("redis down")
	if code, _ := f.post(t, "stop", `{"chat":"c1","agent":"demo"}`); code != http.StatusInternalServerError {
		t.Errorf("queue error: %d", code)
	}
}

// The page and its configuration are served; the page is accessible: its controls have labels.
func TestPage(t *testing.T) {
	f := newFixture(t, nil)
	get := func(p string) (string, string) {
		resp, err := http.Get(f.srv.URL + "/chat/" + p)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != 200 {
			t.Fatalf("GET %s: %d", p, resp.StatusCode)
		}
		return string(b), resp.Header.Get("Content-Type")
	}
	html, ct := get("")
	if !strings.HasPrefix(ct, "text/html") {
		t.Errorf("page Content-Type %q", ct)
	}
	for _, want := range []string{`<label for="agent">`, `<label for="text"`, `<label for="image"`, `id="send"`, `id="stop"`, `src="app.js"`} {
		if !strings.Contains(html, want) {
			t.Errorf("page lacks %s", want)
		}
	}
	if js, ct := get("app.js"); !strings.Contains(ct, "javascript") || !strings.Contains(js, "EventSource") {
		t.Errorf("app.js: %q", ct)
	}
	body, _ := get("config")
	var cfg struct {
		Agents     []Agent `json:"agents"`
		AnyAgent   bool    `json:"any_agent"`
		JournalURL string  `json:"journal_url"`
	}
	if err := json.Unmarshal([]byte(body), &cfg); err != nil || len(cfg.Agents) != 1 || cfg.Agents[0].Name != "demo" || cfg.JournalURL != "/turns/" || cfg.AnyAgent {
		t.Errorf("config %s (%v)", body, err)
	}
}

// RedisSaid keeps a chat's messages by id, with an expiry.
func TestRedisSaid(t *testing.T) {
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	defer rdb.Close()
	s := &RedisSaid{Redis: rdb, Prefix: "t:"}
	c := record.Conversation{Integration: "web", ChatID: "c1"}
	ctx := context.Background()
	for i := 0; i < 2; i++ { // a repeated put changes nothing
		if err := s.Put(ctx, c, "m1", Said1{Text: "hi", Images: 2}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ctx, c, []string{"m1", "m2"})
	if err != nil || len(got) != 1 || got["m1"] != (Said1{Text: "hi", Images: 2}) {
		t.Fatalf("got %v %v", got, err)
	}
	if ttl := mr.TTL("t:webchat:said:web:c1"); ttl <= 0 {
		t.Errorf("no expiry: %v", ttl)
	}
}
