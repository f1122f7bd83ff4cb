package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/shard"
)

// WaitingTurn is what is known of a turn that waits and has not started
// (it may have no journal record yet).
type WaitingTurn struct {
	TaskID string `json:"task_id"`
	Queue  string `json:"queue,omitempty"`
	// State: "waiting behind <task id>" (or "waiting behind approval
	// request <task id>"), "waiting" when what it waits for is not known,
	// or "pending" (it runs when a worker is free).
	State string `json:"state"`
	// Asynq is the task's Asynq state ("scheduled", "pending", …), or
	// "parked" while it is between two Asynq tasks (enqueued again in a
	// moment).
	Asynq  string `json:"asynq_state"`
	Behind string `json:"behind,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Since: when it began to wait behind Behind (known once it parked).
	Since time.Time `json:"since,omitzero"`
	// Position in its conversation's line (0: next), -1 when unknown.
	Position int `json:"position"`
	// NextCheck: when Asynq runs it at the latest (its safety net); the
	// turn ahead wakes it sooner.
	NextCheck time.Time `json:"next_check,omitzero"`
}

// WaitingFinder finds turns that wait, by their task id or the beginning
// of it: as asynqmon's ID column shows it (up to the id's first '-'), or
// as a table cuts it. It looks in the parking records and in the
// scheduled and pending tasks of Queues (their first 1000 each, for a
// beginning of an id).
type WaitingFinder struct {
	Inspector *asynq.Inspector
	RDB       redis.UniversalClient
	KeyPrefix string // LETTAQ_KEY_PREFIX, default "lettaq:"
	// Shards is the deployment's layout (zero: one shard): a parked turn's
	// record is in its shard's keys.
	Shards   shard.Layout
	Ordering Ordering
	Queues   []string
}

// WaitingFinder returns a WaitingFinder on the worker's Redis, queues and
// ordering, to find the turns that wait (for the lettaq turns command or an
// operator's page).
func (w *Worker) WaitingFinder() WaitingFinder {
	f := WaitingFinder{RDB: w.replies.rdb, KeyPrefix: w.replies.opts.Prefix, Shards: w.replies.keys().Layout, Ordering: w.cfg.Ordering}
	for q := range w.cfg.Queues {
		f.Queues = append(f.Queues, q)
	}
	slices.Sort(f.Queues)
	if w.ord != nil {
		f.Inspector = w.ord.insp
		f.Ordering.Sequencer = w.ord.seq
	}
	return f
}

// maxWaitingScan bounds the tasks a search by the beginning of an id reads
// per queue and state.
const maxWaitingScan = 1000

// Find returns the waiting turn id names; an error wrapping ErrNotFound
// when none, an *AmbiguousError when several begin with it.
func (f WaitingFinder) Find(ctx context.Context, id string) (*WaitingTurn, error) {
	id = strings.TrimSuffix(strings.TrimSuffix(id, "…"), "...")
	if id == "" || f.Inspector == nil {
		return nil, fmt.Errorf("%w: no waiting turn %q", ErrNotFound, id)
	}
	if wt, err := f.exact(ctx, id); !errors.Is(err, ErrNotFound) {
		return wt, err
	}
	seen := map[string]bool{}
	var cands []string
	add := func(tid string) {
		if strings.HasPrefix(tid, id) && !seen[tid] {
			seen[tid] = true
			cands = append(cands, tid)
		}
	}
	parked, err := f.parking().Due(ctx, time.Now().Add(time.Hour), maxWaitingScan)
	if err != nil {
		return nil, err
	}
	for _, tid := range parked {
		add(tid)
	}
	for _, q := range f.Queues {
		for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){f.Inspector.ListScheduledTasks, f.Inspector.ListPendingTasks} {
			tasks, err := list(q, asynq.PageSize(maxWaitingScan))
			if err != nil && !errors.Is(err, asynq.ErrQueueNotFound) {
				return nil, err
			}
			for _, ti := range tasks {
				add(ti.ID)
			}
		}
	}
	switch len(cands) {
	case 0:
		return nil, fmt.Errorf("%w: no waiting turn's task id begins with %q", ErrNotFound, id)
	case 1:
		return f.exact(ctx, cands[0])
	}
	slices.Sort(cands)
	amb := &AmbiguousError{Prefix: id, Candidates: cands, More: len(cands) > MaxLookupCandidates}
	if amb.More {
		amb.Candidates = cands[:MaxLookupCandidates]
	}
	return nil, amb
}

func (f WaitingFinder) parking() store.Parking {
	p := f.KeyPrefix
	if p == "" {
		p = store.DefaultPrefix
	}
	return store.Parking{RDB: f.RDB, Keys: store.Keys{Prefix: p, Layout: f.Shards}}
}

// exact finds the waiting turn of task id taskID.
func (f WaitingFinder) exact(ctx context.Context, taskID string) (*WaitingTurn, error) {
	wt := &WaitingTurn{TaskID: taskID, Position: -1}
	p, perr := f.parking().Get(ctx, taskID)
	switch {
	case perr == nil:
		wt.Queue, wt.Asynq, wt.Behind, wt.Reason, wt.Since = p.Queue, "parked", p.Behind, p.Reason, p.Since
	case !errors.Is(perr, store.ErrNotParked):
		return nil, perr
	}
	var info *asynq.TaskInfo
	if wt.Asynq == "" {
		qs := f.Queues
		if len(qs) == 0 {
			qs = []string{defaultQueue}
		}
		for _, q := range qs {
			i, err := f.Inspector.GetTaskInfo(q, taskID)
			if err == nil {
				info = i
				break
			}
			if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
				return nil, err
			}
		}
		if info == nil {
			return nil, fmt.Errorf("%w: no waiting turn %s", ErrNotFound, taskID)
		}
		switch info.State {
		case asynq.TaskStateScheduled, asynq.TaskStatePending, asynq.TaskStateRetry:
		default:
			return nil, fmt.Errorf("%w: turn %s is %s, not waiting", ErrNotFound, taskID, info.State)
		}
		wt.Queue, wt.Asynq, wt.NextCheck = info.Queue, info.State.String(), info.NextProcessAt
		if m, err := DecodePayload(info.Payload); err == nil {
			wt.Since = m.EnqueuedAt
			if !f.Ordering.Off && m.Approval == nil {
				f.placeInLine(ctx, wt, m)
			}
		}
	}
	switch {
	case wt.Behind != "":
		wt.State = "waiting behind " + wt.Behind
	case wt.Asynq == "pending":
		wt.State = "pending"
	default:
		wt.State = "waiting"
	}
	return wt, nil
}

// placeInLine fills wt's place in m's line and the turn at its head.
func (f WaitingFinder) placeInLine(ctx context.Context, wt *WaitingTurn, m Message) {
	seq := f.Ordering.Sequencer
	if seq == nil {
		cfg := f.Ordering.Config
		if cfg.Prefix == "" {
			cfg.Prefix = OrderingPrefix(f.KeyPrefix)
		}
		s, err := ordering.New(f.RDB, cfg)
		if err != nil {
			return
		}
		seq = s
	}
	key := f.Ordering.Key(m)
	pos, err := seq.Position(ctx, key, wt.TaskID)
	if err != nil || pos < 0 {
		return
	}
	wt.Position = pos
	if pos == 0 {
		return
	}
	if head, err := seq.Head(ctx, key); err == nil && head != "" && head != wt.TaskID {
		wt.Behind = head
		wt.Reason = fmt.Sprintf("waiting for the turn ahead: %s (position %d in the line)", head, pos)
	}
}
