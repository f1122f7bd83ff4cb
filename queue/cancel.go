package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Stopping a turn: Client.Cancel writes a cancel record for the
// turn (store: <prefix>cancel:<task id>) before it answers, then publishes
// the task id. What happens next depends on where the turn is:
//
//   - answered already (its final event written, or its journal outcome
//     final): nothing changes, and no record is written;
//   - waiting (scheduled, pending, or between attempts in Asynq's retry
//     set): the canceller itself ends it (dropWaiting, then
//     finishWaiting): the task leaves Asynq and its chat's line, the next
//     turn of the line is woken, and its final event says it was cancelled.
//     It was never sent. But a turn between attempts that may have sent
//     already (mayHaveReachedLetta) is run at once instead: that attempt
//     reads the record and cancels its run (or never sends);
//   - running (an attempt is active): the worker running it hears the
//     publish (or reads the record when it (re)subscribes, or at the start
//     of its next attempt) and asks Letta to cancel the run; the turn ends
//     with whatever Letta says happened (see cancelwatch.go and queue/internal/attempt).

// cancelTTL is how long a cancel record lives: the journal's default
// retention (a turn is not retried longer than that).
const cancelTTL = 7 * 24 * time.Hour

// CancelRequest names the turns Client.Cancel stops: one turn by TaskID or
// Otid (either takes a whole task id or otid: never the beginning of one,
// which could name another turn), or a chat's turns (Chat and AgentID,
// under ordering): the one at the head of its line (running, or next to
// run), and with All every turn of the chat's line.
type CancelRequest struct {
	TaskID  string               `json:"task_id,omitempty"`
	Otid    string               `json:"otid,omitempty"`
	Chat    *record.Conversation `json:"chat,omitempty"`
	AgentID string               `json:"agent_id,omitempty"`
	All     bool                 `json:"all,omitempty"`
	// By and Reason go to the journal (record.TurnRecord.Cancel). Optional.
	By     string `json:"by,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// CancelStatus says what Cancel did to one turn.
type CancelStatus string

const (
	// CancelDone: the turn was waiting; it was removed from the queue and
	// its chat's line, never sent, and its final event (error, permanent,
	// stop_reason cancelled) is written.
	CancelDone CancelStatus = "cancelled"
	// CancelAsked: the turn is running; its worker asks Letta to cancel the
	// run, and the turn's final event says what Letta did (cancelled with
	// what the agent had said, or its answer if the run had ended).
	CancelAsked CancelStatus = "cancelling"
	// CancelAnswered: the turn had ended already; nothing changed.
	CancelAnswered CancelStatus = "answered"
)

// CancelledTurn is what Cancel did to one turn.
type CancelledTurn struct {
	TaskID string       `json:"task_id"`
	Otid   string       `json:"otid,omitempty"`
	Status CancelStatus `json:"status"`
	// Outcome: for CancelAnswered, how the turn ended (the journal's
	// outcome, "answered" when only its final event is known).
	Outcome string `json:"outcome,omitempty"`
}

// CancelResult is what Cancel did, turn by turn (in line order for a chat).
type CancelResult struct {
	Turns []CancelledTurn `json:"turns"`
}

// Stopped reports whether Cancel stopped a turn or asked its worker to (a
// result of only CancelAnswered turns changed nothing).
func (r CancelResult) Stopped() bool {
	for _, t := range r.Turns {
		if t.Status != CancelAnswered {
			return true
		}
	}
	return false
}

// Cancel stops the turns r names (see CancelRequest and CancelStatus). The
// cancel is recorded in Redis before Cancel returns: a worker that dies
// while it runs the turn leaves it to the attempt that recovers the turn. A
// turn that is found nowhere (neither in Asynq nor in the journal) is an
// error wrapping ErrNotFound; a request naming nothing, or more than one
// way, is a *ValidationError. Client needs ClientConfig.Replies (the records
// are kept under its prefix).
func (c *Client) Cancel(ctx context.Context, r CancelRequest) (CancelResult, error) {
	if c.cfg.Replies == nil {
		return CancelResult{}, errors.New("queue: Cancel needs ClientConfig.Replies")
	}
	ids, err := c.cancelTargets(ctx, r)
	if err != nil {
		return CancelResult{}, err
	}
	cr := record.CancelRecord{By: r.By, At: c.cfg.Now().UTC(), Reason: r.Reason}
	if cr.By == "" {
		cr.By = "client"
	}
	var res CancelResult
	for _, id := range ids {
		t, err := c.cancelTurn(ctx, id, cr)
		if err != nil {
			return res, err
		}
		res.Turns = append(res.Turns, t)
	}
	return res, nil
}

// cancelJournal is the journal under the client's reply prefix.
func (c *Client) cancelJournal() *Journal {
	return NewJournal(c.cfg.Replies.rdb, JournalOptions{Prefix: c.cfg.Replies.opts.Prefix, Shards: c.cfg.Replies.keys().Layout})
}

// cancelTargets resolves r to task ids.
func (c *Client) cancelTargets(ctx context.Context, r CancelRequest) ([]string, error) {
	n := 0
	for _, set := range []bool{r.TaskID != "", r.Otid != "", r.Chat != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return nil, invalid("task_id", "name one turn: a task_id, an otid, or a chat (with agent_id)")
	}
	if r.Chat == nil {
		id := r.TaskID
		if id == "" {
			id = r.Otid
		}
		if r.TaskID != "" {
			// A turn that never started has no journal record: Asynq has it.
			_, err := ordering.FindTask(c.insp, c.shards.queueOf(id), id)
			if err == nil {
				return []string{id}, nil
			}
			// Nor does a parked one, in no Asynq queue for a moment.
			if p, err := c.parked(ctx, id); err == nil && p != nil {
				return []string{id}, nil
			}
		}
		// The whole id, never the beginning of one (Journal.Lookup, for
		// people reading the journal): a message not enqueued yet would
		// cancel another whose id begins with its own.
		rec, err := c.cancelJournal().ByIDOrOtid(ctx, id)
		if errors.Is(err, ErrNotFound) {
			return nil, fmt.Errorf("%w: no turn has the task id or otid %q (a cancel takes the whole id)", ErrNotFound, id)
		}
		if err != nil {
			return nil, err
		}
		return []string{rec.TaskID}, nil
	}
	if err := r.Chat.Validate(); err != nil {
		return nil, err
	}
	if r.AgentID == "" {
		return nil, invalid("agent_id", "a chat's turns are found with its agent: give agent_id")
	}
	if c.seq == nil {
		return nil, errors.New("queue: a chat's turns are found through its ordering line, and ordering is off: name the turn by task id or otid")
	}
	key := c.cfg.Ordering.Key(Message{AgentID: r.AgentID, Conversation: *r.Chat})
	members, err := c.seq.Members(ctx, key)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, id := range members {
		if c.cfg.Ordering.Scope == ordering.ScopeAgent && !c.ofChat(ctx, id, *r.Chat) {
			continue // the agent's line mixes chats
		}
		ids = append(ids, id)
		if !r.All {
			break
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: chat %s:%s of agent %s has no turn running or waiting", ErrNotFound, r.Chat.Integration, r.Chat.ChatID, r.AgentID)
	}
	return ids, nil
}

// ofChat reports whether task id is a turn of chat (its payload, else its
// journal record, says).
func (c *Client) ofChat(ctx context.Context, id string, chat record.Conversation) bool {
	if info, err := ordering.FindTask(c.insp, c.shards.queueOf(id), id); err == nil {
		m, err := DecodePayload(info.Payload)
		return err == nil && m.Conversation == chat
	}
	rec, err := c.cancelJournal().Get(ctx, id)
	return err == nil && rec.Conversation == chat
}

// cancelTurn cancels one turn (see Cancel).
func (c *Client) cancelTurn(ctx context.Context, id string, cr record.CancelRecord) (CancelledTurn, error) {
	j := c.cancelJournal()
	rec, err := j.Get(ctx, id)
	if err != nil && !errors.Is(err, ErrNotFound) {
		return CancelledTurn{}, err
	}
	ended := CancelledTurn{TaskID: id, Status: CancelAnswered}
	if rec != nil {
		ended.Otid, ended.Outcome = rec.Otid, rec.Outcome
	}
	answered, err := c.cfg.Replies.Answered(ctx, id)
	if err != nil {
		return CancelledTurn{}, err
	}
	if rec != nil && (attempt.FinalOutcome(rec.Outcome) || rec.Outcome == record.OutcomeCoalesced) {
		return ended, nil
	}
	if answered {
		if ended.Outcome == "" || ended.Outcome == record.OutcomeRetrying {
			ended.Outcome = record.OutcomeAnswered
		}
		return ended, nil
	}
	insp := c.insp
	info, ierr := ordering.FindTask(insp, c.shards.queueOf(id), id)
	if ierr != nil && !errors.Is(ierr, asynq.ErrTaskNotFound) {
		return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, ierr)
	}
	var parked *store.Parked
	var continued bool // by a takeover's task
	if info == nil {
		if parked, err = c.parked(ctx, id); err != nil {
			return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
		}
	}
	var m Message
	switch {
	case parked != nil:
		// Waiting, parked: momentarily in no Asynq queue.
		if m, err = DecodePayload(parked.Payload); err != nil {
			return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
		}
	case info != nil:
		if info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived {
			// The original task of a turn that a takeover continues
			// (takeover.go) ends at once when Asynq recovers it: the turn
			// runs on under the takeover's task, whose worker stops it.
			if continued, err = c.continuedByTakeover(ctx, insp, info.Queue, id); err != nil {
				return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
			}
			if !continued {
				if ended.Outcome == "" {
					ended.Outcome = info.State.String()
				}
				return ended, nil
			}
		}
		if m, err = DecodePayload(info.Payload); err != nil {
			return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
		}
	case rec == nil:
		return CancelledTurn{}, fmt.Errorf("%w: no turn has the task id %q", ErrNotFound, id)
	default:
		// The task is gone from Asynq (deleted by hand, its retention
		// passed) and its journal says it never ended: it is ended here.
		m = Message{AgentID: rec.AgentID, Conversation: rec.Conversation, MessageID: rec.MessageID, EnqueuedAt: rec.EnqueuedAt}
	}
	otid := OtidFor(m, id)
	b, err := json.Marshal(cr)
	if err != nil {
		return CancelledTurn{}, err
	}
	// The record first: from here on every attempt of the turn ends it.
	if _, err := c.cfg.Replies.st.PutCancel(ctx, id, b, cancelTTL); err != nil {
		return CancelledTurn{}, fmt.Errorf("queue: record the cancel of %s: %w", id, err)
	}
	if continued {
		return CancelledTurn{TaskID: id, Otid: otid, Status: CancelAsked}, nil
	}
	if info != nil && info.State == asynq.TaskStateActive && c.seq != nil {
		if pos, err := c.seq.Position(ctx, c.cfg.Ordering.Key(m), id); err == nil && pos > 0 {
			// An attempt that is not its chat's turn (it is being put
			// back, having read no record): it is waiting in a moment.
			var gone bool
			if info, gone = c.awaitPutBack(ctx, insp, info); gone {
				return CancelledTurn{TaskID: id, Otid: otid, Status: CancelDone}, nil // its attempt read the record
			}
			if info == nil { // parked meanwhile
				if parked, err = c.parked(ctx, id); err != nil {
					return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
				}
				if parked == nil { // neither parked nor in Asynq: its attempt ended it
					return CancelledTurn{TaskID: id, Otid: otid, Status: CancelDone}, nil
				}
			}
		}
	}
	if info != nil && info.State != asynq.TaskStateActive && c.mayHaveReachedLetta(ctx, j, rec) {
		// Between attempts after a send: its run may be going on at Letta.
		// An attempt now reads the record, cancels the run and follows it.
		_ = insp.RunTask(info.Queue, id)
		return CancelledTurn{TaskID: id, Otid: otid, Status: CancelAsked}, nil
	}
	if info != nil && !c.dropWaiting(insp, info) {
		// Running (or it started meanwhile): its worker stops it.
		return CancelledTurn{TaskID: id, Otid: otid, Status: CancelAsked}, nil
	}
	// A parked turn's record is marked dropped: its re-enqueue in flight,
	// if any, deletes the task again (queue/internal/line). Harmless for a turn
	// that is not parked.
	if _, err := c.parking().Drop(ctx, id); err != nil {
		return CancelledTurn{}, fmt.Errorf("queue: cancel %s: %w", id, err)
	}
	queueName := c.shards.queueOf(id)
	switch {
	case info != nil:
		queueName = info.Queue
	case parked != nil:
		queueName = parked.Queue
	}
	if err := c.finishWaiting(ctx, insp, queueName, id, otid, m, rec, cr); err != nil {
		return CancelledTurn{}, err
	}
	return CancelledTurn{TaskID: id, Otid: otid, Status: CancelDone}, nil
}

// continuedByTakeover reports whether the turn id, whose own task has
// ended, runs on under a takeover's task that has not (takeover.go).
func (c *Client) continuedByTakeover(ctx context.Context, insp *asynq.Inspector, queueName, id string) (bool, error) {
	by, err := store.NewTakeover(c.cfg.Replies.rdb, store.Keys{Prefix: c.cfg.Replies.opts.Prefix}).TakenOverBy(ctx, id)
	if err != nil || by == "" || by == id {
		return false, err
	}
	info, err := ordering.FindTask(insp, queueName, by)
	if errors.Is(err, asynq.ErrTaskNotFound) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return info.State != asynq.TaskStateCompleted && info.State != asynq.TaskStateArchived, nil
}

// awaitPutBack waits (up to 2s) for the active attempt of a turn that is
// not its chat's turn to end: it returns the task as it is then (nil when
// it is in no queue: parked, or ended), and gone when the attempt ended
// the turn itself (it read the cancel record: the task is completed, its
// final event written).
func (c *Client) awaitPutBack(ctx context.Context, insp *asynq.Inspector, info *asynq.TaskInfo) (_ *asynq.TaskInfo, gone bool) {
	deadline := time.Now().Add(2 * time.Second)
	for info.State == asynq.TaskStateActive && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		next, err := insp.GetTaskInfo(info.Queue, info.ID)
		if errors.Is(err, asynq.ErrTaskNotFound) {
			return nil, false // revoked: parked (or ended: the caller looks)
		}
		if err != nil {
			return info, false
		}
		info = next
	}
	if info.State == asynq.TaskStateArchived || info.State == asynq.TaskStateCompleted {
		return nil, true
	}
	return info, false
}

// mayHaveReachedLetta reports whether an earlier attempt of the turn may
// have sent its message: the journal knows its run, or holds an intent to
// send that was not withdrawn (when in doubt: yes).
func (c *Client) mayHaveReachedLetta(ctx context.Context, j *Journal, rec *record.TurnRecord) bool {
	if rec == nil {
		return false
	}
	if rec.RunID != "" {
		return true
	}
	intents, err := j.Intents(ctx, rec.TaskID)
	return err != nil || len(journal.LiveIntents(intents)) > 0
}

// dropWaiting takes a waiting turn's task out of Asynq (scheduled, pending,
// or waiting for a retry), and reports whether it did: false for a task
// that is running (active) or left meanwhile.
func (c *Client) dropWaiting(insp *asynq.Inspector, info *asynq.TaskInfo) bool {
	switch info.State {
	case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		return insp.DeleteTask(info.Queue, info.ID) == nil
	}
	return false
}

// finishWaiting ends a waiting turn whose task dropWaiting removed: it
// leaves its chat's line (waker.leave: the next turn is woken when it was
// the head, parked or not), its final event says it was cancelled, and its
// journal record is finished.
func (c *Client) finishWaiting(ctx context.Context, insp *asynq.Inspector, queueName, id, otid string, m Message, rec *record.TurnRecord, cr record.CancelRecord) error {
	ctx = context.WithoutCancel(ctx) // the task is gone: finish it whatever the caller does
	if c.seq != nil {
		if err := c.waker(insp).Leave(ctx, queueName, c.cfg.Ordering.Key(m), id); err != nil {
			return fmt.Errorf("queue: cancel %s: %w", id, err)
		}
	}
	ev := record.ReplyEvent{Type: record.EventError, TaskID: id, Otid: otid, MessageID: m.MessageID, StopReason: record.StopReasonCancelled, Permanent: true}
	if rec != nil {
		ev.RunID = rec.RunID
	}
	if _, err := c.cfg.Replies.EmitAnswerOnce(ctx, m.Conversation, ev); err != nil {
		return fmt.Errorf("queue: cancel %s: the final event: %w", id, err)
	}
	now := c.cfg.Now().UTC()
	if rec == nil {
		rec = &record.TurnRecord{}
	}
	rec.TaskID, rec.Otid, rec.AgentID = id, otid, m.AgentID
	rec.Conversation, rec.MessageID, rec.Queue = m.Conversation, m.MessageID, queueName
	if rec.EnqueuedAt.IsZero() {
		rec.EnqueuedAt = m.EnqueuedAt
	}
	cr.Phase = record.CancelPhaseWaiting
	rec.Outcome, rec.StopReason, rec.FinishedAt, rec.Error, rec.Cancel = record.OutcomeCancelled, record.StopReasonCancelled, now, "", &cr
	if c.cfg.CancelObserver != nil {
		c.cfg.CancelObserver.TurnCancelled(queueName, record.CancelPhaseWaiting)
	}
	if err := c.cancelJournal().Save(ctx, rec); err != nil {
		return fmt.Errorf("queue: cancel %s: the journal: %w", id, err)
	}
	return nil
}
