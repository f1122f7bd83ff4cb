// Package cancel is one attempt's side of its turn's cancel: whether a cancel was asked for
// (its record), and asking Letta, once, to stop the turn's run as soon as that can be
// done: once the turn's Letta thread is known, and on the agent endpoints once its run's id
// is known too (the agent may be running other chats' runs: its cancel is never sent
// without the run). Letta then ends the run, and the turn ends as Letta ended it.
//
// The attempt's checks (attempt.go) are Turn's too: noting a record as read (NoteJSON, Read),
// what a cancel does at the start (AtStart) and before the send (BeforeSend), and the phase
// a cancelled turn ends in (Decided). They reach the attempt through Attempt; the cancelled
// endings themselves, which write the turn's journal, events and line, are the attempt's.
//
// The cancel channel's goroutine, the stream's reader and the attempt all reach a Turn: it
// is safe for concurrent use.
package cancel

import (
	"log/slog"
	"net/http"
	"sync"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/queue/record"
)

// Run is what a Turn needs of the attempt's run at Letta.
type Run interface {
	// RunID is the run's id as known now ("" before Letta named it).
	RunID() string
	// CancelRun asks Letta to cancel: the conversation's cancel when conv is set, else
	// the agent's cancel of the run runID. It is called off the attempt's goroutine.
	CancelRun(conv, runID string) error
}

// Turn is one attempt's side of its turn's cancel.
type Turn struct {
	mu         sync.Mutex
	rec        *record.CancelRecord // the cancel asked for (nil: none)
	thread     bool                 // the turn's Letta thread is known (ThreadKnown)
	convID     string               // its conversation ("": the agent endpoints)
	asking     bool                 // a call to Letta's cancel is under way or done
	waitRun    bool                 // Letta's cancel waits for the run's id
	ended      bool                 // the turn is finishing: Letta is not asked any more
	beforeSend bool                 // the send was refused
	recovered  bool                 // the attempt started with its run known
}

// Note notes the cancel r, unless one is noted already (first says whether this one was
// the first), and asks Letta to cancel the run when the turn has one under way.
func (c *Turn) Note(r record.CancelRecord, run Run, log *slog.Logger) (first bool) {
	c.mu.Lock()
	first = c.rec == nil
	if first {
		c.rec = &r
	}
	ask := c.thread && !c.ended
	c.mu.Unlock()
	if ask {
		c.ask(run, log)
	}
	return first
}

// Asked is a copy of the cancel asked for, nil when none was.
func (c *Turn) Asked() *record.CancelRecord {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.rec == nil {
		return nil
	}
	r := *c.rec
	return &r
}

// ThreadKnown tells the turn's Letta thread (conv: its conversation, "" on the agent
// endpoints): from here on a cancel asks Letta.
func (c *Turn) ThreadKnown(conv string, run Run, log *slog.Logger) {
	c.mu.Lock()
	c.thread, c.convID = true, conv
	ask := c.rec != nil
	c.mu.Unlock()
	if ask {
		c.ask(run, log)
	}
}

// RunKnown tells that the run's id is known now: a cancel that waited for it asks Letta.
func (c *Turn) RunKnown(run Run, log *slog.Logger) {
	c.mu.Lock()
	ask := c.waitRun && c.rec != nil && !c.ended
	c.mu.Unlock()
	if ask {
		c.ask(run, log)
	}
}

// RefusedSend notes that the cancel refused the turn's send.
func (c *Turn) RefusedSend() {
	c.mu.Lock()
	c.beforeSend = true
	c.mu.Unlock()
}

// Recovered notes whether the attempt started with its run known (a turn that recovers a
// run another attempt sent).
func (c *Turn) Recovered(known bool) {
	c.mu.Lock()
	c.recovered = known
	c.mu.Unlock()
}

// End tells that the turn is finishing: Letta is not asked any more. It returns whether the
// cancel refused the send and whether the attempt started with its run known.
func (c *Turn) End() (refusedSend, recovered bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	return c.beforeSend, c.recovered
}

// ask asks Letta to cancel the turn's run, once, off the caller's goroutine. A 409 before
// the run is known (nothing runs yet) asks again once it is; any other failure leaves the
// turn to end as Letta ends it.
func (c *Turn) ask(run Run, log *slog.Logger) {
	c.mu.Lock()
	if c.asking || c.ended || !c.thread {
		c.mu.Unlock()
		return
	}
	conv, runID := c.convID, run.RunID()
	if conv == "" && runID == "" {
		c.waitRun = true
		c.mu.Unlock()
		return
	}
	c.asking, c.waitRun = true, false
	c.mu.Unlock()
	go func() {
		err := run.CancelRun(conv, runID)
		l := log.With(slog.String("conversation", conv))
		switch {
		case err == nil:
			l.Info("asked Letta to cancel the turn's run")
		case agentclient.StatusCode(err) == http.StatusConflict && runID == "":
			// Nothing runs yet (the send is on its way): again once the run is known.
			c.mu.Lock()
			c.asking, c.waitRun = false, true
			c.mu.Unlock()
			l.Info("Letta has no run to cancel yet: asking again once the run is known")
			if run.RunID() != "" {
				c.RunKnown(run, log)
			}
		case agentclient.StatusCode(err) == http.StatusConflict:
			l.Info("Letta has no run to cancel: the turn ends as its run did", "error", err.Error())
		default:
			l.Warn("Letta's cancel failed: the turn ends as its run does", "error", err.Error())
		}
	}()
}
