package slackfake

import (
	"fmt"
	"sync"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	relayslack "github.com/lettaq/lettaq/relay/slack"
)

// workspace is the fake's conversations as both sides see them: every
// message in order, the users' (Users) and the app's (WebAPI), each app
// message's place on the platform by its channel and ts.
type workspace struct {
	platform *fakeplatform.Platform

	mu   sync.Mutex
	seq  int
	said []said            // every message of the conversations, the users' and the app's, in order
	byTS map[string]msgRef // channel/ts → the platform's message
}

func newWorkspace(p *fakeplatform.Platform) *workspace {
	return &workspace{platform: p, byTS: map[string]msgRef{}}
}

// said is one message of a conversation: a user's (user set) or the app's
// (ref set; its text is the platform's, as edited since).
type said struct {
	channel, ts, thread string
	user, text          string
	ref                 msgRef
}

type msgRef struct {
	id   string
	conv string // the relay conversation's chat id
}

// next is the next message's sequence number and ts; under mu.
func (w *workspace) next() (int, string) {
	w.seq++
	return w.seq, fmt.Sprintf("1700000000.%06d", w.seq)
}

// appSaid records the app's message ref, posted in channel (thread: its
// thread's ts, or ""), and returns its ts.
func (w *workspace) appSaid(channel, thread string, ref msgRef) string {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ts := w.next()
	w.byTS[channel+"/"+ts] = ref
	w.said = append(w.said, said{channel: channel, ts: ts, thread: thread, ref: ref})
	return ts
}

// userSaid records user's message text in channel and returns its ts and
// the id of the event that delivers it.
func (w *workspace) userSaid(channel, thread, user, text string) (ts, eventID string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, ts := w.next()
	w.said = append(w.said, said{channel: channel, ts: ts, thread: thread, user: user, text: text})
	return ts, fmt.Sprintf("Ev%06d", n)
}

// lookup finds the app's message at channel/ts.
func (w *workspace) lookup(channel, ts string) (msgRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ref, ok := w.byTS[channel+"/"+ts]
	return ref, ok
}

// forget takes the app's message at channel/ts out of the lookup (deleted)
// and returns it.
func (w *workspace) forget(channel, ts string) (msgRef, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	ref, ok := w.byTS[channel+"/"+ts]
	delete(w.byTS, channel+"/"+ts)
	return ref, ok
}

// Said is one message of a conversation as GET /user/messages lists it.
type Said struct {
	TS      string   `json:"ts"`
	Thread  string   `json:"thread_ts,omitempty"`
	From    string   `json:"from"` // "app", or the user's id
	Text    string   `json:"text"`
	Buttons []Button `json:"buttons,omitempty"`
	Edits   int      `json:"edits,omitempty"`
	channel string
}

// Button is an app's button as the user sees it: press it with its value.
type Button struct {
	Label string `json:"label"`
	Value string `json:"value"`
}

// conversation returns channel's messages (in thread when thread is not
// ""; every channel's when channel is ""), the users' and the app's, oldest
// first, the app's as shown now (a deleted one left out).
func (w *workspace) conversation(channel, thread string) []Said {
	w.mu.Lock()
	all := append([]said(nil), w.said...)
	w.mu.Unlock()
	var out []Said
	for _, s := range all {
		if channel != "" && s.channel != channel {
			continue
		}
		if thread != "" && s.thread != thread && s.ts != thread {
			continue
		}
		m := Said{TS: s.ts, Thread: s.thread, From: s.user, Text: s.text, channel: s.channel}
		if s.user == "" {
			shown, ok := w.shown(s.ref)
			if !ok {
				continue
			}
			m.From, m.Text, m.Edits = "app", shown.Text, shown.Edits
			for _, b := range shown.Buttons {
				m.Buttons = append(m.Buttons, Button{Label: b.Label, Value: b.Data})
			}
		}
		out = append(out, m)
	}
	return out
}

// shown is the app's message ref as the platform shows it now (false once deleted).
func (w *workspace) shown(ref msgRef) (fakeplatform.Msg, bool) {
	for _, m := range w.platform.Messages(queueConv(ref.conv)) {
		if m.ID == ref.id {
			return m, true
		}
	}
	return fakeplatform.Msg{}, false
}

func queueConv(chatID string) record.Conversation {
	return record.Conversation{Integration: relayslack.Integration, ChatID: chatID}
}
