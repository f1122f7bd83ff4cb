package slack

import (
	"sync"
	"time"
)

// The adapter's pace: its calls stay within Slack's rate limits instead of
// being sent into 429 answers. Slack limits each method per workspace (its
// tiers: chat.update and chat.delete are Tier 3, about 50 a minute) and
// chat.postMessage per channel (about one a second, short bursts allowed).
// A call that finds no room is not made: the adapter answers the relay a
// relay.RateLimitedError marked Paced, with the time there will be room, and
// the relay makes the call then with the chat's newest content, so a growing
// answer's edits that find no room merge into a later one.
//
// Finals first. A growing answer's text (relay.Message.Growing) may only use
// the room the finals do not need: while at least half of the window is
// free, and beyond one call kept for every other message shown growing
// whose final text has not gone yet (each will need one). A final text takes
// any room there is. So 50 chats streaming at once spend the minute's 50
// updates on their 50 final texts, not on their growth.
//
// The pace is one process's: replicas of the relay pace apart, and a 429
// Slack still answers (another replica, another app of the workspace) stops
// that method (or that channel's posts) for its Retry-After.

// Rate is at most N calls in any Per.
type Rate struct {
	N   int
	Per time.Duration
}

// Pace are the rates the adapter keeps.
type Pace struct {
	Update Rate // chat.update, per workspace
	Delete Rate // chat.delete, per workspace
	Post   Rate // chat.postMessage, per channel
	Status Rate // assistant.threads.setStatus, per workspace
}

// DefaultPace is Slack's published limits: Tier 3 for chat.update and
// chat.delete, about a post a second per channel with bursts (5 in any 5 s),
// and assistant.threads.setStatus taken as Tier 4 (not published).
var DefaultPace = Pace{
	Update: Rate{50, time.Minute},
	Delete: Rate{50, time.Minute},
	Post:   Rate{5, 5 * time.Second},
	Status: Rate{100, time.Minute},
}

// growingRetry is when a growing text put off is tried again (with what has
// grown meanwhile): the relay's pace of edits in a chat, so that a final
// text coming meanwhile waits no longer than that.
const growingRetry = time.Second

// openFor is how long a message shown growing keeps a call for its final
// text after the adapter last saw it: a turn whose final text shows without
// an edit (it was shown whole already), or that ended elsewhere, lets it go.
const openFor = 15 * time.Second

// pacer keeps a Pace. The zero value is not usable: newPacer.
type pacer struct {
	mu      sync.Mutex
	pace    Pace
	now     func() time.Time
	windows map[string]*window
	open    map[string]time.Time // "channel/ts" of a message shown growing → last seen
}

// window is one limit's calls made in the last Per.
type window struct {
	rate    Rate
	calls   []time.Time
	blocked time.Time // Slack's Retry-After: no call before
}

func newPacer(p Pace) *pacer {
	return &pacer{pace: p, now: time.Now, windows: map[string]*window{}, open: map[string]time.Time{}}
}

// margin widens every window a little: a call is counted when it leaves,
// and Slack counts it when it arrives.
const margin = 20 // Per/margin: 5 s → 250 ms, a minute → 3 s

// take asks room for one call under limit key at rate. growing marks a
// growing text; msg is the message it changes ("" for a new one); keep
// makes a growing text leave the room the open messages' finals need (for a
// workspace's limit, not a channel's). It returns 0 when the call may go (and
// counts it), or how long to wait.
func (p *pacer) take(key string, rate Rate, growing bool, msg string, keep bool) time.Duration {
	if rate.N <= 0 || rate.Per <= 0 {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	w := p.windows[key]
	if w == nil {
		w = &window{rate: rate}
		p.windows[key] = w
	}
	per := rate.Per + rate.Per/margin
	for len(w.calls) > 0 && now.Sub(w.calls[0]) >= per {
		w.calls = w.calls[1:]
	}
	if now.Before(w.blocked) {
		if growing {
			return growingRetry
		}
		return w.blocked.Sub(now)
	}
	free := rate.N - len(w.calls)
	if growing {
		if msg != "" {
			p.open[msg] = now // alive: its final is still to come
		}
		kept := 0
		if keep {
			kept = p.kept(now, msg)
		}
		if free-kept <= rate.N/2 {
			return growingRetry
		}
	} else if free <= 0 {
		return per - now.Sub(w.calls[0])
	}
	w.calls = append(w.calls, now)
	return 0
}

// kept is the calls kept for the final texts of the messages shown growing
// other than msg. Messages not seen for openFor are let go.
func (p *pacer) kept(now time.Time, msg string) int {
	n := 0
	for m, seen := range p.open {
		switch {
		case now.Sub(seen) > openFor:
			delete(p.open, m)
		case m != msg:
			n++
		}
	}
	return n
}

// shown records a call's outcome for message msg ("channel/ts"): shown
// growing, it will need a final text; shown final (or gone), no longer.
func (p *pacer) shown(msg string, growing bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if growing {
		p.open[msg] = p.now()
	} else {
		delete(p.open, msg)
	}
}

// limited records Slack's 429 for limit key: no call before retryAfter.
func (p *pacer) limited(key string, retryAfter time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.windows[key]
	if w == nil {
		return
	}
	if until := p.now().Add(retryAfter); until.After(w.blocked) {
		w.blocked = until
	}
}
