package slack_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// recorder is the queue and the relay as Inbound sees them.
type recorder struct {
	mu       sync.Mutex
	enqueued []queue.Message
	commands []string // conversation + " " + text + " by " + sender
	presses  []string // conversation + " " + data + " by " + sender
	fail     error
}

func (r *recorder) Enqueue(_ context.Context, m queue.Message) (queue.EnqueueResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return queue.EnqueueResult{}, r.fail
	}
	r.enqueued = append(r.enqueued, m)
	return queue.EnqueueResult{TaskID: "t-" + m.MessageID}, nil
}

func (r *recorder) Command(_ context.Context, c record.Conversation, text, sender string) (queue.CancelResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.commands = append(r.commands, c.String()+" "+text+" by "+sender)
	return queue.CancelResult{}, nil
}

func (r *recorder) Press(_ context.Context, c record.Conversation, data, sender string) (queue.EnqueueResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.presses = append(r.presses, c.String()+" "+data+" by "+sender)
	return queue.EnqueueResult{}, nil
}

const agent = "agent-00000000-0000-4000-8000-000000000001"

func newInbound(t *testing.T) (*httptest.Server, *recorder, *slackfake.Inbound) {
	t.Helper()
	rec := &recorder{}
	f := slackfake.New(slackfake.Options{})
	t.Cleanup(f.Stop)
	srv := httptest.NewServer(http.StripPrefix("/slack", &relayslack.Inbound{SigningSecret: f.SigningSecret(), AgentID: agent, Enqueue: rec, Controls: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return srv, rec, f.Inbound()
}

func status(t *testing.T) func(*http.Response, error) (int, string) {
	return func(resp *http.Response, err error) (int, string) { return readResp(t, resp, err) }
}

func readResp(t *testing.T, resp *http.Response, err error) (int, string) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestInboundRefusesUnsignedAndStaleRequests: a wrong secret, no signature,
// or a signature older than five minutes (a replay) is refused, and nothing
// is enqueued.
func TestInboundRefusesUnsignedAndStaleRequests(t *testing.T) {
	srv, rec, good := newInbound(t)
	ev := map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> hi", "ts": "1.1", "channel": "C1"}
	wrong := &slackfake.Inbound{Secret: "not-the-secret"}
	if code, _ := status(t)(wrong.Event(srv.URL+"/slack/events", "Ev1", ev, 0)); code != http.StatusUnauthorized {
		t.Fatalf("wrong secret: %d, want 401", code)
	}
	stale := &slackfake.Inbound{Secret: good.Secret, Now: func() time.Time { return time.Now().Add(-6 * time.Minute) }}
	if code, _ := status(t)(stale.Event(srv.URL+"/slack/events", "Ev1", ev, 0)); code != http.StatusUnauthorized {
		t.Fatalf("stale signature: %d, want 401", code)
	}
	if code, _ := status(t)(http.Post(srv.URL+"/slack/events", "application/json", strings.NewReader(`{"type":"url_verification","challenge":"x"}`))); code != http.StatusUnauthorized {
		t.Fatalf("unsigned: %d, want 401", code)
	}
	if len(rec.enqueued) != 0 {
		t.Fatalf("enqueued %v", rec.enqueued)
	}
}

// TestInboundURLVerificationEchoesTheChallenge, as Slack's request URL check wants.
func TestInboundURLVerificationEchoesTheChallenge(t *testing.T) {
	srv, _, in := newInbound(t)
	code, body := status(t)(in.URLVerification(srv.URL+"/slack/events", "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P"))
	if code != 200 || body != "3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P" {
		t.Fatalf("%d %q", code, body)
	}
}

// TestInboundMentionsAndDMsBecomeMessagesOfTheirThread: a channel mention
// opens its thread's conversation, a reply in the thread continues it, a
// DM outside a thread is the DM's conversation; a redelivered event carries
// the same message id (one task); the bot's own messages and edits are
// not turns.
func TestInboundMentionsAndDMsBecomeMessagesOfTheirThread(t *testing.T) {
	srv, rec, in := newInbound(t)
	url := srv.URL + "/slack/events"
	send := func(id string, ev map[string]any, retry int) {
		t.Helper()
		if code, body := status(t)(in.Event(url, id, ev, retry)); code != 200 {
			t.Fatalf("%s: %d %s", id, code, body)
		}
	}
	send("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> what is up?", "ts": "100.1", "channel": "C1"}, 0)
	send("Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> what is up?", "ts": "100.1", "channel": "C1"}, 1)
	send("Ev2", map[string]any{"type": "app_mention", "user": "U2", "text": "<@U0BOT> and then?", "ts": "100.5", "thread_ts": "100.1", "channel": "C1"}, 0)
	send("Ev3", map[string]any{"type": "message", "channel_type": "im", "user": "U1", "text": "hello", "ts": "200.1", "channel": "D1", "client_msg_id": "c3"}, 0)
	send("Ev4", map[string]any{"type": "message", "channel_type": "im", "bot_id": "B0BOT", "text": "my own answer", "ts": "200.2", "channel": "D1"}, 0)
	send("Ev5", map[string]any{"type": "message", "channel_type": "im", "subtype": "message_changed", "ts": "200.3", "channel": "D1", "message": map[string]any{"text": "edited", "user": "U1"}}, 0)
	send("Ev6", map[string]any{"type": "message", "channel_type": "im", "user": "U1", "text": "in a thread", "ts": "200.9", "thread_ts": "200.1", "channel": "D1"}, 0)
	type got struct{ conv, text, id, sender string }
	var gots []got
	for _, m := range rec.enqueued {
		if m.AgentID != agent {
			t.Fatalf("agent %q", m.AgentID)
		}
		gots = append(gots, got{m.Conversation.String(), m.Text, m.MessageID, m.SenderID})
	}
	want := []got{
		{"slack:C1/100.1", "what is up?", "C1/100.1", "U1"},
		{"slack:C1/100.1", "what is up?", "C1/100.1", "U1"}, // the redelivery: same message id, one task
		{"slack:C1/100.1", "and then?", "C1/100.5", "U2"},
		{"slack:D1", "hello", "D1/200.1", "U1"},
		{"slack:D1/200.1", "in a thread", "D1/200.9", "U1"},
	}
	if len(gots) != len(want) {
		t.Fatalf("enqueued %+v, want %+v", gots, want)
	}
	for i := range want {
		if gots[i] != want[i] {
			t.Fatalf("enqueued[%d] %+v, want %+v", i, gots[i], want[i])
		}
	}
}

// TestInboundEnqueueFailureAsksSlackToDeliverAgain: a failed enqueue is a
// 500, so that Slack retries the event.
func TestInboundEnqueueFailureAsksSlackToDeliverAgain(t *testing.T) {
	srv, rec, in := newInbound(t)
	rec.fail = errors.New("redis down")
	code, _ := status(t)(in.Event(srv.URL+"/slack/events", "Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> hi", "ts": "1.1", "channel": "C1"}, 0))
	if code != http.StatusInternalServerError {
		t.Fatalf("%d, want 500", code)
	}
}

// TestInboundStopIsScopedToItsThread: "stop" said to the app in a thread
// stops that thread's turn only; the /stop slash command (Slack sends it
// without a thread) stops a DM's conversation, and in a channel only says
// how to stop a thread.
func TestInboundStopIsScopedToItsThread(t *testing.T) {
	srv, rec, in := newInbound(t)
	status(t)(in.Event(srv.URL+"/slack/events", "Ev1", map[string]any{"type": "app_mention", "user": "U1", "text": "<@U0BOT> stop", "ts": "100.9", "thread_ts": "100.1", "channel": "C1"}, 0))
	status(t)(in.Event(srv.URL+"/slack/events", "Ev2", map[string]any{"type": "message", "channel_type": "im", "user": "U1", "text": "/stop", "ts": "200.9", "channel": "D1"}, 0))
	code, body := status(t)(in.Command(srv.URL+"/slack/commands", "/stop", "", "D2", "U3"))
	if code != 200 || !strings.Contains(body, "ephemeral") {
		t.Fatalf("%d %s", code, body)
	}
	_, body = status(t)(in.Command(srv.URL+"/slack/commands", "/stop", "", "C1", "U1"))
	if !strings.Contains(body, "in its thread") {
		t.Fatalf("channel /stop answered %s", body)
	}
	want := []string{"slack:C1/100.1 /stop by U1", "slack:D1 /stop by U1", "slack:D2 /stop by U3"}
	if strings.Join(rec.commands, "|") != strings.Join(want, "|") {
		t.Fatalf("commands %q, want %q", rec.commands, want)
	}
	if len(rec.enqueued) != 0 {
		t.Fatalf("a stop was enqueued as a message: %+v", rec.enqueued)
	}
}

// TestInboundButtonPressGoesToPressInItsThread: a signed block_actions
// payload reaches the relay's Press with the thread's conversation; an
// unsigned one does not.
func TestInboundButtonPressGoesToPressInItsThread(t *testing.T) {
	srv, rec, in := newInbound(t)
	code, _ := status(t)(in.Press(srv.URL+"/slack/interactivity", "C1", "100.1", "100.7", "U1", "ap:abc:y"))
	if code != 200 {
		t.Fatalf("%d", code)
	}
	forged := &slackfake.Inbound{Secret: "forged"}
	if code, _ := status(t)(forged.Press(srv.URL+"/slack/interactivity", "C1", "100.1", "100.7", "U9", "ap:abc:n")); code != http.StatusUnauthorized {
		t.Fatalf("forged press: %d, want 401", code)
	}
	if len(rec.presses) != 1 || rec.presses[0] != "slack:C1/100.1 ap:abc:y by U1" {
		t.Fatalf("presses %q", rec.presses)
	}
}
