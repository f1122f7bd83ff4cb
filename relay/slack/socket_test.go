package slack_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	sg "github.com/slack-go/slack"

	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/slack/slackfake"
)

// TestSocketModeEventBecomesOneTaskAndIsAcked: over Socket Mode (the fake's
// apps.connections.open and websocket), a DM's events_api envelope becomes
// one message of the DM's conversation, acknowledged by its envelope id; a
// redelivery carries the same message id (one task); an event whose
// enqueue failed is not acknowledged, so that Slack delivers it again.
func TestSocketModeEventBecomesOneTaskAndIsAcked(t *testing.T) {
	rec := &recorder{}
	f := slackfake.New(slackfake.Options{})
	t.Cleanup(f.Stop)
	in := &relayslack.Inbound{AgentID: agent, Enqueue: rec, Controls: rec, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	api := sg.New(f.Token(), sg.OptionAPIURL(f.APIURL()), sg.OptionAppLevelToken(f.AppToken()))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- in.RunSocketMode(ctx, api) }()

	dm := map[string]any{"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "text": "hello over the socket", "ts": "1700000000.000001"}
	for range 2 { // the second time a redelivery
		if err := f.Socket.WaitAcked(ctx, f.Socket.Event(dm)); err != nil {
			t.Fatalf("the event was not acknowledged: %v", err)
		}
	}
	rec.mu.Lock()
	got := append(rec.enqueued[:0:0], rec.enqueued...)
	rec.fail = errors.New("redis is down")
	rec.mu.Unlock()
	if len(got) != 2 || got[0].MessageID != "D1/1700000000.000001" || got[1].MessageID != got[0].MessageID ||
		got[0].Conversation != relayslack.Conversation("D1", "") || got[0].Text != "hello over the socket" {
		t.Fatalf("enqueued %+v, want the DM twice under one message id", got)
	}

	failed := f.Socket.Event(map[string]any{"type": "message", "channel_type": "im", "channel": "D1", "user": "U1", "text": "lost?", "ts": "1700000000.000002"})
	ignored := f.Socket.Event(map[string]any{"type": "message", "subtype": "message_changed", "channel_type": "im", "channel": "D1", "ts": "1700000000.000003"})
	if err := f.Socket.WaitAcked(ctx, ignored); err != nil { // requests are handled in order: the failed one was handled before
		t.Fatal(err)
	}
	short, stop := context.WithTimeout(ctx, 100*time.Millisecond)
	defer stop()
	if err := f.Socket.WaitAcked(short, failed); err == nil {
		t.Fatal("an event whose enqueue failed was acknowledged: Slack would not deliver it again")
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("RunSocketMode: %v, want nil once stopped", err)
	}
}
