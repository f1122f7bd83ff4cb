package telegram_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/telegram/telegramfake"
)

const agent = "agent-00000000-0000-4000-8000-000000000000"

// sink records what Inbound hands lettaq; fail makes the next n enqueues fail.
type sink struct {
	mu      sync.Mutex
	msgs    []queue.Message
	tasks   map[string]bool
	fail    int
	stops   []record.Conversation
	presses []string
	pressed map[string]bool
	changed chan struct{}
}

func newSink() *sink {
	return &sink{tasks: map[string]bool{}, pressed: map[string]bool{}, changed: make(chan struct{}, 100)}
}

func (s *sink) Enqueue(_ context.Context, m queue.Message) (queue.EnqueueResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fail > 0 {
		s.fail--
		return queue.EnqueueResult{}, errors.New("redis down")
	}
	id := queue.TaskIDFor(m)
	res := queue.EnqueueResult{TaskID: id, Duplicate: s.tasks[id]}
	if !s.tasks[id] {
		s.tasks[id] = true
		s.msgs = append(s.msgs, m)
	}
	s.changed <- struct{}{}
	return res, nil
}

func (s *sink) Command(_ context.Context, c record.Conversation, text, _ string) (queue.CancelResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stops = append(s.stops, c)
	s.changed <- struct{}{}
	return queue.CancelResult{}, nil
}

func (s *sink) Press(_ context.Context, c record.Conversation, data, _ string) (queue.EnqueueResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.presses = append(s.presses, c.ChatID+" "+data)
	dup := s.pressed[data]
	s.pressed[data] = true
	s.changed <- struct{}{}
	return queue.EnqueueResult{TaskID: "answer:x", Duplicate: dup}, nil
}

func (s *sink) snapshot() ([]queue.Message, []record.Conversation, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]queue.Message(nil), s.msgs...), append([]record.Conversation(nil), s.stops...), append([]string(nil), s.presses...)
}

type inboundEnv struct {
	fake *telegramfake.Server
	srv  *httptest.Server
	a    *telegram.Adapter
	in   *telegram.Inbound
	sink *sink
	rdb  *redis.Client
}

func newInbound(t *testing.T, cfg telegram.InboundConfig) *inboundEnv {
	t.Helper()
	fake := telegramfake.New("", telegramfake.Rules{})
	srv := httptest.NewServer(fake.Handler())
	t.Cleanup(srv.Close)
	t.Cleanup(fake.Close)
	a, err := telegram.New(telegram.Config{Token: telegramfake.Token, ServerURL: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s := newSink()
	cfg.AgentID, cfg.Enqueue, cfg.Relay = agent, s, s
	cfg.BotUsername, cfg.BotID = telegramfake.BotUsername, telegramfake.BotID
	mr := miniredis.RunT(t)
	rdb := redis.NewClient(&redis.Options{Addr: mr.Addr()})
	t.Cleanup(func() { rdb.Close() })
	return &inboundEnv{fake: fake, srv: srv, a: a, in: telegram.NewInbound(a, cfg), sink: s, rdb: rdb}
}

// startPoll runs a Poller until the returned stop is called.
func (e *inboundEnv) startPoll() (stop func()) {
	p := &telegram.Poller{A: e.a, In: e.in, Redis: e.rdb, Key: "tg:offset", Timeout: time.Second}
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = p.Run(ctx); close(done) }()
	return func() { cancel(); <-done }
}

// poll runs a Poller until cond holds on the sink, then stops it.
func (e *inboundEnv) poll(t *testing.T, cond func(msgs []queue.Message, stops []record.Conversation, presses []string) bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	defer e.startPoll()()
	for {
		if cond(e.sink.snapshot()) {
			return
		}
		select {
		case <-e.sink.changed:
		case <-ctx.Done():
			m, s, pr := e.sink.snapshot()
			t.Fatalf("condition never held: msgs %+v stops %v presses %v", m, s, pr)
		}
	}
}

func TestPollerTakesEachUpdateOnceAcrossRestartAndFailure(t *testing.T) {
	e := newInbound(t, telegram.InboundConfig{})
	e.sink.fail = 1 // the first enqueue fails: the update must come again
	e.fake.SendText(telegramfake.From{Chat: 7}, "one")
	e.fake.SendText(telegramfake.From{Chat: 7}, "two")
	e.poll(t, func(m []queue.Message, _ []record.Conversation, _ []string) bool { return len(m) == 2 })
	// A restart: the offset in Redis makes the next poller take only the new one.
	e.fake.SendText(telegramfake.From{Chat: 7}, "three")
	e.poll(t, func(m []queue.Message, _ []record.Conversation, _ []string) bool { return len(m) == 3 })
	msgs, _, _ := e.sink.snapshot()
	var got []string
	for _, m := range msgs {
		got = append(got, m.Conversation.String()+" "+m.MessageID+" "+m.Text)
	}
	want := []string{"telegram:7 1 one", "telegram:7 2 two", "telegram:7 3 three"}
	if strings.Join(got, "|") != strings.Join(want, "|") {
		t.Fatalf("enqueued %q, want %q", got, want)
	}
	// The offset moves past the third update (its next getUpdates asks
	// from 1004, confirming it: Telegram drops it), and nothing more is
	// enqueued.
	stop := e.startPoll()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := e.fake.Wait(ctx, func(f *telegramfake.Server) bool {
		for _, c := range f.Calls() {
			if c.Method == "getUpdates" && c.Params["offset"] == "1004" {
				return true
			}
		}
		return false
	})
	stop()
	if err != nil {
		t.Fatal("the offset never moved past the third update")
	}
	if off, _ := e.rdb.Get(context.Background(), "tg:offset").Int64(); off != 1004 || e.fake.Pending() != 0 {
		t.Fatalf("offset %d, %d pending, want 1004 and none", off, e.fake.Pending())
	}
	if msgs, _, _ := e.sink.snapshot(); len(msgs) != 3 {
		t.Fatalf("%d tasks, want 3", len(msgs))
	}
}

func TestGroupsAnswerOnlyWhenAddressed(t *testing.T) {
	e := newInbound(t, telegram.InboundConfig{Allow: map[int64]bool{-100: true, 7: true}})
	g := telegramfake.From{Chat: -100}
	e.fake.SendText(g, "chatter among people")
	e.fake.SendText(g, "@"+telegramfake.BotUsername+" what time is it?")
	e.fake.SendText(telegramfake.From{Chat: -200}, "@"+telegramfake.BotUsername+" a chat not allowed")
	e.fake.SendText(telegramfake.From{Chat: -100, Thread: 9}, "/stop@"+telegramfake.BotUsername)
	e.fake.SendText(telegramfake.From{Chat: 7}, "/cancel")
	e.poll(t, func(m []queue.Message, s []record.Conversation, _ []string) bool { return len(m) >= 1 && len(s) == 2 })
	// The bot's own answer in the group, then a reply to it: addressed.
	id, err := e.a.Send(context.Background(), telegram.Conversation(-100, 0), relayMsg("It is noon."))
	if err != nil {
		t.Fatal(err)
	}
	e.fake.SendText(telegramfake.From{Chat: -100, ReplyTo: atoi(id)}, "thanks, and tomorrow?")
	e.poll(t, func(m []queue.Message, _ []record.Conversation, _ []string) bool { return len(m) == 2 })
	msgs, stops, _ := e.sink.snapshot()
	if msgs[0].Text != "what time is it?" || msgs[0].Conversation.ChatID != "-100" || msgs[1].Text != "thanks, and tomorrow?" {
		t.Fatalf("enqueued %+v", msgs)
	}
	if stops[0].ChatID != "-100/9" || stops[1].ChatID != "7" {
		t.Fatalf("stops %v, want the topic -100/9 and chat 7", stops)
	}
}

func TestPhotoBecomesImageContent(t *testing.T) {
	e := newInbound(t, telegram.InboundConfig{})
	jpeg := []byte("\xff\xd8\xff\xe0fake-jpeg")
	e.fake.SendPhoto(telegramfake.From{Chat: 7}, jpeg, "what is this?")
	e.poll(t, func(m []queue.Message, _ []record.Conversation, _ []string) bool { return len(m) == 1 })
	msgs, _, _ := e.sink.snapshot()
	m := msgs[0]
	if m.Text != "what is this?" || len(m.Images) != 1 || m.Images[0].MediaType != "image/jpeg" || m.Images[0].Data != "/9j/4GZha2UtanBlZw==" {
		t.Fatalf("enqueued %+v", m)
	}
}

func TestPressRunsRelayPressAndAnswersCallbackQuery(t *testing.T) {
	e := newInbound(t, telegram.InboundConfig{})
	id, err := e.a.Send(context.Background(), telegram.Conversation(7, 0), relayButtons("Run it?", "ap:k:y"))
	if err != nil {
		t.Fatal(err)
	}
	q1 := e.fake.Press(7, atoi(id), "ap:k:y")
	q2 := e.fake.Press(7, atoi(id), "ap:k:y")
	defer e.startPoll()()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.fake.Wait(ctx, func(f *telegramfake.Server) bool { return f.Count(0, "answerCallbackQuery") == 2 }); err != nil {
		t.Fatal("callback queries not answered")
	}
	if _, _, p := e.sink.snapshot(); len(p) != 2 || p[0] != "7 ap:k:y" {
		t.Fatalf("presses %q, want two of chat 7", p)
	}
	if ok, text := e.fake.Answered(q1); !ok || text != "" {
		t.Fatalf("first press answered %v %q", ok, text)
	}
	if ok, text := e.fake.Answered(q2); !ok || text != "Already answered." {
		t.Fatalf("second press answered %v %q", ok, text)
	}
}

func TestWebhookChecksSecretAndTakesUpdates(t *testing.T) {
	e := newInbound(t, telegram.InboundConfig{})
	h := httptest.NewServer(&telegram.Webhook{In: e.in, Secret: "s3cret"})
	defer h.Close()
	// Without the secret: refused.
	resp, err := http.Post(h.URL, "application/json", strings.NewReader(`{"update_id":1,"message":{"message_id":1,"date":1,"chat":{"id":7,"type":"private"},"text":"forged"}}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("no secret: %d, want 403", resp.StatusCode)
	}
	// Through the fake's setWebhook: delivered with the secret; a failed
	// enqueue answers 500 and the fake delivers again.
	e.sink.fail = 1
	b := `{"url":"` + h.URL + `","secret_token":"s3cret"}`
	r2, err := http.Post(e.srv.URL+"/bot"+telegramfake.Token+"/setWebhook", "application/json", strings.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	r2.Body.Close()
	e.fake.SendText(telegramfake.From{Chat: 7}, "hello")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for {
		msgs, _, _ := e.sink.snapshot()
		if len(msgs) == 1 && e.fake.Pending() == 0 {
			if msgs[0].Text != "hello" {
				t.Fatalf("enqueued %+v", msgs[0])
			}
			return
		}
		select {
		case <-e.sink.changed:
		case <-time.After(50 * time.Millisecond): // Pending has no signal of its own
		case <-ctx.Done():
			t.Fatalf("webhook delivery not taken: %+v, pending %d", msgs, e.fake.Pending())
		}
	}
}
