package slackfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack/slacktest"
)

// Socket Mode as the app meets it: apps.connections.open, called with the
// app-level token, answers a websocket address; on that websocket the fake
// says hello, sends each request queued by SocketEvent as an events_api
// envelope, and records the app's acknowledgements (an envelope id sent
// back). One connection at a time.

// socketSide is the fake's Socket Mode state, under Fake.mu.
type socketSide struct {
	outbox  chan []byte
	acked   map[string]bool
	changed chan struct{} // closed at each acknowledgement
	seq     int
}

// AppToken is the app-level token the fake's apps.connections.open takes.
func (f *Fake) AppToken() string { return f.opt.AppToken }

func (f *Fake) socketHandlers(c slacktest.Customize) {
	c.Handle("/apps.connections.open", f.connectionsOpen)
	c.Handle("/socket", slacktest.Websocket(f.socket))
}

func (f *Fake) connectionsOpen(w http.ResponseWriter, r *http.Request) {
	if bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); bearer != f.opt.AppToken {
		writeJSON(w, map[string]any{"ok": false, "error": "invalid_auth"}) // a bot token here is refused too
		return
	}
	writeJSON(w, map[string]any{"ok": true, "url": "ws://" + f.ServerAddr + "/socket"})
}

func (f *Fake) socket(c *websocket.Conn) {
	if err := c.WriteJSON(map[string]any{"type": "hello", "num_connections": 1,
		"connection_info": map[string]any{"app_id": "A0FAKE"}}); err != nil {
		return
	}
	go func() { // the app's acknowledgements
		for {
			var ack struct {
				EnvelopeID string `json:"envelope_id"`
			}
			if err := c.ReadJSON(&ack); err != nil {
				return
			}
			f.mu.Lock()
			f.sock.acked[ack.EnvelopeID] = true
			close(f.sock.changed)
			f.sock.changed = make(chan struct{})
			f.mu.Unlock()
		}
	}()
	for msg := range f.sock.outbox {
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			f.sock.outbox <- msg // for the next connection
			return
		}
	}
}

// SocketEvent queues an Events API event_callback wrapping event for the app
// connected over Socket Mode (sent once it is connected); it returns the
// envelope's id.
func (f *Fake) SocketEvent(event map[string]any) string {
	f.mu.Lock()
	f.sock.seq++
	id := fmt.Sprintf("env-%06d", f.sock.seq)
	f.mu.Unlock()
	payload := map[string]any{"token": "unused", "team_id": "T0FAKE", "api_app_id": "A0FAKE", "type": "event_callback",
		"event_id": "Ev" + id, "event_time": time.Now().Unix(), "event": event}
	msg, _ := json.Marshal(map[string]any{"envelope_id": id, "type": "events_api", "payload": payload,
		"accepts_response_payload": false, "retry_attempt": 0})
	f.sock.outbox <- msg
	return id
}

// WaitAcked returns once the app has acknowledged envelope id, or ctx's error.
func (f *Fake) WaitAcked(ctx context.Context, id string) error {
	for {
		f.mu.Lock()
		acked, ch := f.sock.acked[id], f.sock.changed
		f.mu.Unlock()
		if acked {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
