package attempt

import (
	"context"
	"fmt"

	"github.com/lettaq/lettaq/queue/record"

	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// What an attempt reads before it runs, in one round trip.

// startRead names what an attempt reads from Redis before it runs, in one
// round trip (with the ordering lock's acquire when it can: see
// Pipeline.acquire): the attempt's record, whether its final event was written,
// its intents, and what approvalGate (the chat's pending approval request)
// and lettaRun.resolveThread (the chat's Letta conversation) need. The turn
// drops what it read (turn.pre) once it has made its run (prepare).
func (t *Pipeline) startRead() store.StartRead {
	w := t.W
	r := store.StartRead{TaskID: t.TaskID}
	if t.Msg.Approval == nil {
		r.Pending, r.AgentID, r.Scope = true, t.Msg.AgentID, w.Approvals.Scope(t.Msg.LettaConversationID, t.Msg.Conversation)
	}
	if w.Threads.Mode == ThreadConversation && t.Msg.LettaConversationID == "" {
		r.Thread = ThreadOf(t.Msg.AgentID, t.Msg.Conversation)
	}
	return r
}

// ReadStart reads what startReads says, unless acquire read it with the
// lock.
func (t *Pipeline) ReadStart(ctx context.Context) (rec *record.TurnRecord, answered bool, intents []record.Intent, err error) {
	if t.Pre == nil {
		t.Pre = t.W.startStores().ReadStart(ctx, t.startRead())
	}
	b, found, err := t.Pre.Record()
	switch {
	case err != nil:
		return nil, false, nil, fmt.Errorf("read the turn journal: queue: journal get %s: %w", t.TaskID, err)
	case !found:
		rec = &record.TurnRecord{}
	default:
		if rec, err = journal.DecodeRecord(t.TaskID, b); err != nil {
			return nil, false, nil, fmt.Errorf("read the turn journal: %w", err)
		}
	}
	if answered, err = t.Pre.Answered(); err != nil {
		return nil, false, nil, fmt.Errorf("queue: answered %s: %w", t.TaskID, err)
	}
	raw, err := t.Pre.Intents()
	if err == nil {
		intents, err = journal.DecodeIntents(t.TaskID, raw)
	}
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: intents of task %s: %w", t.TaskID, err)
	}
	runner, err := t.Pre.Runner()
	if err != nil {
		return nil, false, nil, fmt.Errorf("queue: number the runner of task %s: %w", t.TaskID, err)
	}
	t.Jr.SetRunner(runner)
	return rec, answered, intents, nil
}
