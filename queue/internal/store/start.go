package store

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// StartRead names what an attempt reads before it runs: its record,
// intents, final-event marker and cancel record (by TaskID), and, when asked, its chat's
// pending approval request and its conversation's thread. It also numbers
// the attempt's runner (the one write among them: see Runner).
type StartRead struct {
	TaskID string
	// Pending: read the request the chat (AgentID, Scope) waits on.
	Pending        bool
	AgentID, Scope string
	// Thread: read the thread kept for it (Hash "": not read).
	Thread ThreadOf
}

// StartStores are the stores the start's reads go to.
type StartStores struct {
	Journal   *Journal
	Replies   *Replies
	Approvals Approvals
	Threads   Threads
}

// StartReads holds the start's reads, queued on a pipeline: their results
// are there once it ran.
type StartReads struct {
	rec, pend, thr *redis.StringCmd // pend, thr: nil when not read
	cancel         *redis.StringCmd
	intents        *redis.StringSliceCmd
	ans, runner    *redis.IntCmd
}

// QueueStartReads queues r's reads: the journal's in jp, the others in rp
// (the same pipeline when both stores are on one client).
func (s StartStores) QueueStartReads(ctx context.Context, jp, rp redis.Pipeliner, r StartRead) *StartReads {
	sr := &StartReads{
		rec:     jp.Get(ctx, s.Journal.Keys.Journal().Turn(r.TaskID)),
		intents: jp.LRange(ctx, s.Journal.Keys.Journal().Intents(r.TaskID), 0, -1),
		runner:  jp.HIncrBy(ctx, s.Journal.Keys.Journal().Runners(r.TaskID), "next", 1),
		ans:     rp.Exists(ctx, s.Replies.Keys.Answered(r.TaskID)),
		cancel:  rp.Get(ctx, s.Replies.Keys.Cancel(r.TaskID)),
	}
	jp.PExpire(ctx, s.Journal.Keys.Journal().Runners(r.TaskID), s.Journal.Retention)
	if r.Pending {
		sr.pend = rp.Get(ctx, s.Approvals.Keys.Approvals().Pending(r.AgentID, r.Scope))
	}
	if r.Thread.Hash != "" {
		sr.thr = rp.Get(ctx, s.Threads.Keys.Thread(r.Thread))
	}
	return sr
}

// ReadStart runs r's reads in one round trip per client (one when the
// journal and the replies share theirs). Each read's error is its own.
func (s StartStores) ReadStart(ctx context.Context, r StartRead) *StartReads {
	jp := s.Journal.RDB.Pipeline()
	rp := jp
	if s.Replies.RDB != s.Journal.RDB {
		rp = s.Replies.RDB.Pipeline()
	}
	sr := s.QueueStartReads(ctx, jp, rp, r)
	_, _ = jp.Exec(ctx)
	if rp != jp {
		_, _ = rp.Exec(ctx)
	}
	return sr
}

// Record is the attempt's journal record (found false: none yet).
func (sr *StartReads) Record() (b []byte, found bool, err error) {
	b, err = sr.rec.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// Answered says whether the attempt's final event was written.
func (sr *StartReads) Answered() (bool, error) {
	n, err := sr.ans.Result()
	return n == 1, err
}

// Cancel is the turn's cancel record (found false: none, or not read).
func (sr *StartReads) Cancel() (b []byte, found bool, err error) {
	if sr == nil || sr.cancel == nil {
		return nil, false, nil
	}
	b, err = sr.cancel.Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, false, nil
	}
	return b, err == nil, err
}

// Runner is the number of the attempt's runner: higher than that of every
// runner of the task that started before its start read. Its saves carry
// it, so that a runner that is no longer the newest writes no record
// (JournalSave). HINCRBY, not idempotent, but a retry that counts twice
// only leaves a number out.
func (sr *StartReads) Runner() (int64, error) { return sr.runner.Result() }

// Intents are the attempt's intents, oldest first.
func (sr *StartReads) Intents() ([]string, error) { return sr.intents.Result() }

// Pending is the task id of the request the chat waits on ("" for none or
// not read).
func (sr *StartReads) Pending() (string, error) {
	if sr == nil || sr.pend == nil {
		return "", nil
	}
	id, err := sr.pend.Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// Thread is the conversation id kept for the thread ("" for none, not
// read, or not readable: the caller reads it again).
func (sr *StartReads) Thread() string {
	id, _ := sr.ThreadRead()
	return id
}

// ThreadRead is Thread, and whether the thread key was read (false: not
// asked for, or its GET failed; true with "": the key holds nothing).
func (sr *StartReads) ThreadRead() (id string, read bool) {
	if sr == nil || sr.thr == nil {
		return "", false
	}
	id, err := sr.thr.Result()
	if errors.Is(err, redis.Nil) {
		return "", true
	}
	return id, err == nil
}
