// Package fakeplatform is a chat platform in memory that counts what it
// receives: the relay's tests, and the later adapters' (Telegram, Slack, web),
// check against it that every message was created once and reads as it should.
//
// Platform implements relay.Adapter directly; Handler serves the same calls
// over HTTP and Client is the relay.Adapter that calls them, so that a relay
// process that is killed mid-turn talks to a platform that outlives it.
package fakeplatform

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// Msg is one message as the platform holds it.
type Msg struct {
	ID      string
	Chat    string
	Text    string
	Buttons []relay.Button
	Deleted bool
	Edits   int
}

// Call is one call the platform received.
type Call struct {
	Method string // send | edit | delete | status
	Chat   string
	ID     string
	Text   string
	Kind   relay.StatusKind
	At     time.Time
	Status int // 200, or 429 when it was refused
}

// Platform is the fake. The zero value is not usable: call New.
type Platform struct {
	mu      sync.Mutex
	limits  relay.Limits
	next    int
	msgs    map[string]*Msg
	calls   []Call
	limited map[string]time.Duration // method → one 429 with this Retry-After
	changed chan struct{}
}

// New returns an empty platform with the given limits (zero: the defaults).
func New(l relay.Limits) *Platform {
	return &Platform{limits: l, msgs: map[string]*Msg{}, limited: map[string]time.Duration{}, changed: make(chan struct{})}
}

// Limits implements relay.Adapter.
func (p *Platform) Limits() relay.Limits { return p.limits }

// RateLimitNext makes the next call of method answer 429 with retryAfter.
func (p *Platform) RateLimitNext(method string, retryAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.limited[method] = retryAfter
}

// record appends a call and wakes Wait; it reports the 429 to return, if any.
func (p *Platform) record(c Call) error {
	c.At = time.Now()
	c.Status = 200
	if ra, ok := p.limited[c.Method]; ok {
		delete(p.limited, c.Method)
		c.Status = 429
		p.calls = append(p.calls, c)
		p.notify()
		return &relay.RateLimitedError{RetryAfter: ra}
	}
	p.calls = append(p.calls, c)
	p.notify()
	return nil
}

func (p *Platform) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// Send implements relay.Adapter.
func (p *Platform) Send(_ context.Context, chat record.Conversation, m relay.Message) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.record(Call{Method: "send", Chat: chat.String(), Text: m.Text}); err != nil {
		return "", err
	}
	p.next++
	id := fmt.Sprintf("m%d", p.next)
	p.msgs[id] = &Msg{ID: id, Chat: chat.String(), Text: m.Text, Buttons: slices.Clone(m.Buttons)}
	p.calls[len(p.calls)-1].ID = id
	return id, nil
}

// Edit implements relay.Adapter; editing a deleted or unknown message is an
// error wrapping relay.ErrPermanent, as on Telegram ("message to edit not found").
func (p *Platform) Edit(_ context.Context, chat record.Conversation, id string, m relay.Message) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.record(Call{Method: "edit", Chat: chat.String(), ID: id, Text: m.Text}); err != nil {
		return err
	}
	msg, ok := p.msgs[id]
	if !ok || msg.Deleted || msg.Chat != chat.String() {
		return fmt.Errorf("fakeplatform: message to edit not found: %w", relay.ErrPermanent)
	}
	msg.Text, msg.Buttons = m.Text, slices.Clone(m.Buttons)
	msg.Edits++
	return nil
}

// Delete implements relay.Adapter.
func (p *Platform) Delete(_ context.Context, chat record.Conversation, id string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.record(Call{Method: "delete", Chat: chat.String(), ID: id}); err != nil {
		return err
	}
	if msg, ok := p.msgs[id]; ok && msg.Chat == chat.String() {
		msg.Deleted = true
	}
	return nil
}

// Status implements relay.Adapter.
func (p *Platform) Status(_ context.Context, chat record.Conversation, s relay.Status) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.record(Call{Method: "status", Chat: chat.String(), Kind: s.Kind, Text: s.Text})
}

// Messages returns the chat's visible (not deleted) messages, oldest first.
func (p *Platform) Messages(chat record.Conversation) []Msg {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Msg
	for i := 1; i <= p.next; i++ {
		m := p.msgs[fmt.Sprintf("m%d", i)]
		if m != nil && m.Chat == chat.String() && !m.Deleted {
			out = append(out, *m)
		}
	}
	return out
}

// Calls returns every call received so far.
func (p *Platform) Calls() []Call {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.calls)
}

// Wait returns once cond holds (checked after every call the platform
// receives; cond may call Messages and Calls), or ctx's error.
func (p *Platform) Wait(ctx context.Context, cond func(p *Platform) bool) error {
	for {
		p.mu.Lock()
		ch := p.changed
		p.mu.Unlock()
		if cond(p) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
