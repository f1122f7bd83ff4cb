package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Approvals keeps the pending approval requests: per request its record
// (the caller's JSON) under its task id, its otid naming the task, and per
// chat (agent and scope) the request it waits on.
type Approvals struct {
	RDB  redis.UniversalClient
	Keys Keys
}

// ErrNoRequest: no request is known by that task id or otid.
var ErrNoRequest = errors.New("no approval request")

// Save records a request as its chat's unanswered one, its keys living
// ttl.
func (a Approvals) Save(ctx context.Context, requestTaskID, otid, agentID, scope string, record []byte, ttl time.Duration) error {
	pending := a.Keys.Approvals().Pending(agentID, scope)
	apart := !strings.HasPrefix(pending, a.Keys.TaskPrefix(requestTaskID))
	_, err := a.RDB.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Set(ctx, a.Keys.Approvals().Request(requestTaskID), record, ttl)
		pl.Set(ctx, a.Keys.Approvals().OtidOf(requestTaskID, otid), requestTaskID, ttl)
		if !apart {
			pl.Set(ctx, pending, requestTaskID, ttl)
		}
		return nil
	})
	if err != nil || !apart {
		return err
	}
	// A thread that chats share keeps its pending request under the base
	// prefix, another slot than the request's: it is written once the
	// request is (a pending key never names a request that is not there).
	return a.RDB.Set(ctx, pending, requestTaskID, ttl).Err()
}

// Record returns the record of the request of task id or otid ref. With
// none, err is ErrNoRequest, and byOtid says that ref is an otid whose
// request expired.
func (a Approvals) Record(ctx context.Context, ref string) (record []byte, byOtid bool, err error) {
	b, err := a.RDB.Get(ctx, a.Keys.Approvals().Request(ref)).Bytes()
	if errors.Is(err, redis.Nil) {
		id, ierr := a.otidTask(ctx, ref)
		if errors.Is(ierr, redis.Nil) {
			return nil, false, ErrNoRequest
		}
		if ierr != nil {
			return nil, false, ierr
		}
		b, err = a.RDB.Get(ctx, a.Keys.Approvals().Request(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, true, ErrNoRequest
		}
	}
	return b, false, err
}

// Pending returns the task id of the request the chat (agent, scope) waits
// on ("" for none).
func (a Approvals) Pending(ctx context.Context, agentID, scope string) (string, error) {
	id, err := a.RDB.Get(ctx, a.Keys.Approvals().Pending(agentID, scope)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// Answered writes the answered request's record (its keys living ttl) and
// clears its chat's pending request while it is this one.
func (a Approvals) Answered(ctx context.Context, requestTaskID, agentID, scope string, record []byte, ttl time.Duration) error {
	if err := a.RDB.Set(ctx, a.Keys.Approvals().Request(requestTaskID), record, ttl).Err(); err != nil {
		return err
	}
	return ClearPending.Run(ctx, a.RDB, []string{a.Keys.Approvals().Pending(agentID, scope)}, requestTaskID).Err()
}

// otidTask returns the request task of otid (redis.Nil: none). An otid
// does not name its shard, so with N shards it is looked for in each, in
// one pipeline: only an answer given by the request's otid (not its task
// id) reads it, which is rare and reads N small keys.
func (a Approvals) otidTask(ctx context.Context, otid string) (string, error) {
	if !a.Keys.Sharded() {
		return a.RDB.Get(ctx, a.Keys.Approvals().Otid(otid)).Result()
	}
	return probeShards(ctx, a.RDB, a.Keys, func(i int) string { return a.Keys.Approvals().OtidIn(i, otid) })
}
