package lettasim

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"strings"
	"sync"
	"time"
)

// thread is one message thread of an agent: a conversation ("conv-<uuid4>"), or the agent's
// default thread (id ""), which is the agent's own history. Conversation endpoints lock a thread
// (one run at a time) and, for background sends, map otids to runs; the agent endpoints write
// to the default thread's history but take no lock and map nothing.
type thread struct {
	id      string // "conv-…"; "" for the default thread
	a       *agent
	summary string
	created time.Time

	// Guarded by a.mu. A default thread keeps its rows in a.history instead of rows.
	rows          []*row
	received      []Received
	runs          []*run // runs started through the conversation endpoints
	lastMessageAt time.Time
	pending       *pendingApproval // the approval request the thread waits on (approvals.go)

	mu       sync.Mutex
	holder   *run      // the run holding the lock (it may have ended or outlived the TTL)
	lockedAt time.Time // never extended
	holdKeys []string  // otidKeys of the holder's request
	otidRuns map[string]otidEntry
	changed  chan struct{} // closed and replaced when the lock is released or the map grows
}

type otidEntry struct {
	r     *run
	until time.Time
}

func newThread(a *agent, id, summary string) *thread {
	return &thread{id: id, a: a, summary: summary, created: time.Now(),
		otidRuns: make(map[string]otidEntry), changed: make(chan struct{})}
}

func (th *thread) isDefault() bool { return th.id == "" }

// publicID is the thread's id as RunInfo and Received report it: "conv-…", "default" for an
// agent's default thread, "" for no thread (the agent endpoints).
func (th *thread) publicID() string {
	switch {
	case th == nil:
		return ""
	case th.isDefault():
		return "default"
	}
	return th.id
}

// name is how errors name the thread.
func (th *thread) name() string {
	if th.isDefault() {
		return "default (agent " + th.a.id + ")"
	}
	return th.id
}

// signal wakes the sends waiting for the lock or the map (th.mu held).
func (th *thread) signal() {
	close(th.changed)
	th.changed = make(chan struct{})
}

// lockHolder returns the run that holds the lock at now, or nil (th.mu held). A run holds it
// until it ends or until ttl after it took it, whichever is first: the TTL is never extended.
func (th *thread) lockHolder(now time.Time, ttl time.Duration) *run {
	h := th.holder
	if h == nil || !h.active() || now.Sub(th.lockedAt) >= ttl {
		return nil
	}
	return h
}

// lookup returns the run that one of keys maps to at now, or nil (th.mu held).
func (th *thread) lookup(keys []string, now time.Time) *run {
	for _, k := range keys {
		if e, ok := th.otidRuns[k]; ok && now.Before(e.until) {
			return e.r
		}
	}
	return nil
}

// register maps keys to r until now+ttl and wakes the waiters (th.mu held).
func (th *thread) register(r *run, keys []string, now time.Time, ttl time.Duration) {
	for _, k := range keys {
		th.otidRuns[k] = otidEntry{r: r, until: now.Add(ttl)}
	}
	th.signal()
}

// runEnded releases the lock if r holds it. Called once the run has ended, with no lock held.
func (th *thread) runEnded(r *run) {
	th.mu.Lock()
	if th.holder == r {
		th.holder = nil
	}
	th.signal()
	th.mu.Unlock()
}

// otidKeys are the keys a background send is mapped by: each otid of its messages, and a hash
// of all of them (as Letta keys both).
func otidKeys(msgs []inMessage) []string {
	otids := make([]string, 0, len(msgs))
	for _, m := range msgs {
		otids = append(otids, m.otid)
	}
	keys := append([]string(nil), otids...)
	sorted := append([]string(nil), otids...)
	sort.Strings(sorted)
	sum := sha256.Sum256([]byte(strings.Join(sorted, "\x00")))
	return append(keys, "#"+hex.EncodeToString(sum[:]))
}

func overlap(a, b []string) bool {
	for _, x := range a {
		for _, y := range b {
			if x == y {
				return true
			}
		}
	}
	return false
}

// acquireResult is what a conversation send gets from the thread.
type acquireResult struct {
	run    *run   // the new run, or the run replayed
	replay bool   // run is an existing background run whose otids match the request
	busy   string // the lock holder's run id when the send is refused (409)
	gone   bool   // the client went away or the Sim closed while waiting
	// refused: the thread's approval state refused the send (409 pending, 400 bad approval)
	refused *refusal
}

// acquire takes the thread's lock for a send and starts its run, or finds the run a background
// send duplicates, or names the holder that refuses it. A background send that loses the race
// to a holder sent with one of its otids gets a second chance: it waits up to
// Config.SecondChance (scaled) for its otids to be mapped (the holder is this very turn, still
// registering) or the lock to free. Any other send finds a held lock busy at once.
func (s *Sim) acquire(done <-chan struct{}, th *thread, p *sendPlan) acquireResult {
	bg := p.background()
	keys := otidKeys(p.msgs)
	var deadline time.Time
	th.mu.Lock()
	for {
		now := time.Now()
		if bg {
			if r := th.lookup(keys, now); r != nil {
				th.mu.Unlock()
				return acquireResult{run: r, replay: true}
			}
		}
		h := th.lockHolder(now, s.lockTTL)
		if h == nil {
			r, ref := s.startTurn(p, th)
			if ref != nil {
				th.mu.Unlock()
				return acquireResult{refused: ref}
			}
			if r == nil {
				th.mu.Unlock()
				return acquireResult{gone: true}
			}
			th.holder, th.lockedAt, th.holdKeys = r, now, keys
			if bg {
				if s.registerLag <= 0 {
					th.register(r, keys, now, s.otidTTL)
				} else {
					time.AfterFunc(s.registerLag, func() {
						th.mu.Lock()
						th.register(r, keys, now, s.otidTTL)
						th.mu.Unlock()
					})
				}
			}
			th.mu.Unlock()
			return acquireResult{run: r}
		}
		if !bg || !overlap(keys, th.holdKeys) {
			th.mu.Unlock()
			return acquireResult{busy: h.id}
		}
		if deadline.IsZero() {
			deadline = now.Add(s.secondChance)
		}
		if !now.Before(deadline) {
			th.mu.Unlock()
			return acquireResult{busy: h.id}
		}
		wake := deadline
		if exp := th.lockedAt.Add(s.lockTTL); exp.Before(wake) {
			wake = exp
		}
		ch := th.changed
		th.mu.Unlock()
		t := time.NewTimer(time.Until(wake))
		select {
		case <-ch:
		case <-t.C:
		case <-done:
			t.Stop()
			return acquireResult{gone: true}
		case <-s.closing:
			t.Stop()
			return acquireResult{gone: true}
		}
		t.Stop()
		th.mu.Lock()
	}
}

// findRun resolves a resume request's run: by run id, else by otid through the map, else the
// newest active run of the thread. It returns an HTTP status and detail when there is none.
func (s *Sim) findRun(th *thread, runID, otid string) (*run, int, string) {
	switch {
	case runID != "":
		r := s.getRun(runID)
		if r == nil || r.th != th {
			return nil, 404, "NOT_FOUND: Run with ID " + runID + " not found in conversation " + th.name()
		}
		return r, 0, ""
	case otid != "":
		th.mu.Lock()
		r := th.lookup([]string{otid}, time.Now())
		th.mu.Unlock()
		if r == nil {
			return nil, 404, "No run found for otid=" + otid
		}
		return r, 0, ""
	}
	th.a.mu.RLock()
	defer th.a.mu.RUnlock()
	for i := len(th.runs) - 1; i >= 0; i-- {
		if th.runs[i].active() {
			return th.runs[i], 0, ""
		}
	}
	return nil, 400, "No active runs found for conversation " + th.name()
}

// --- the Sim's registry of conversations ---

// newConversation adds a conversation of a (a.mu not held).
func (s *Sim) newConversation(a *agent, summary string) *thread {
	th := newThread(a, newID("conv"), summary)
	s.mu.Lock()
	s.convs[th.id] = th
	s.convOrder = append(s.convOrder, th)
	s.mu.Unlock()
	return th
}

func (s *Sim) getConv(id string) *thread {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.convs[id]
}
