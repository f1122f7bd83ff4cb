package slackfake

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	"github.com/slack-go/slack/slacktest"
)

// Socket Mode as the app meets it: apps.connections.open, called with the
// app-level token, answers a websocket address; on that websocket the fake
// says hello, sends each request queued by SocketEvent as an events_api
// envelope, and records the app's acknowledgements (an envelope id sent
// back). One connection at a time.

// SocketMode is the fake's Socket Mode side.
type SocketMode struct {
	appToken string
	addr     string // the fake's host:port
	outbox   chan []byte

	mu      sync.Mutex
	acked   map[string]bool
	changed chan struct{} // closed at each acknowledgement
	seq     int
}

func newSocketMode(appToken string) *SocketMode {
	return &SocketMode{appToken: appToken, outbox: make(chan []byte, 256), acked: map[string]bool{}, changed: make(chan struct{})}
}

func (m *SocketMode) handle(c slacktest.Customize) {
	c.Handle("/apps.connections.open", m.connectionsOpen)
	c.Handle("/socket", slacktest.Websocket(m.socket))
}

func (m *SocketMode) connectionsOpen(w http.ResponseWriter, r *http.Request) {
	if bearer, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); bearer != m.appToken {
		writeJSON(w, map[string]any{"ok": false, "error": "invalid_auth"}) // a bot token here is refused too
		return
	}
	writeJSON(w, map[string]any{"ok": true, "url": "ws://" + m.addr + "/socket"})
}

func (m *SocketMode) socket(c *websocket.Conn) {
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
			m.mu.Lock()
			m.acked[ack.EnvelopeID] = true
			close(m.changed)
			m.changed = make(chan struct{})
			m.mu.Unlock()
		}
	}()
	for msg := range m.outbox {
		if err := c.WriteMessage(websocket.TextMessage, msg); err != nil {
			m.outbox <- msg // for the next connection
			return
		}
	}
}

// Event queues an Events API event_callback wrapping event for the app
// connected over Socket Mode (sent once it is connected); it returns the
// envelope's id.
func (m *SocketMode) Event(event map[string]any) string {
	m.mu.Lock()
	m.seq++
	id := fmt.Sprintf("env-%06d", m.seq)
	m.mu.Unlock()
	payload := map[string]any{"token": "unused", "team_id": "T0FAKE", "api_app_id": "A0FAKE", "type": "event_callback",
		"event_id": "Ev" + id, "event_time": time.Now().Unix(), "event": event}
	msg, _ := json.Marshal(map[string]any{"envelope_id": id, "type": "events_api", "payload": payload,
		"accepts_response_payload": false, "retry_attempt": 0})
	m.outbox <- msg
	return id
}

// WaitAcked returns once the app has acknowledged envelope id, or ctx's error.
func (m *SocketMode) WaitAcked(ctx context.Context, id string) error {
	for {
		m.mu.Lock()
		acked, ch := m.acked[id], m.changed
		m.mu.Unlock()
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
