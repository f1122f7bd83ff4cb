package store

import (
	"context"
	"errors"
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
	_, err := a.RDB.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		pl.Set(ctx, a.Keys.ApprovalRequest(requestTaskID), record, ttl)
		pl.Set(ctx, a.Keys.ApprovalOtid(otid), requestTaskID, ttl)
		pl.Set(ctx, a.Keys.ApprovalPending(agentID, scope), requestTaskID, ttl)
		return nil
	})
	return err
}

// Record returns the record of the request of task id or otid ref. With
// none, err is ErrNoRequest, and byOtid says that ref is an otid whose
// request expired.
func (a Approvals) Record(ctx context.Context, ref string) (record []byte, byOtid bool, err error) {
	b, err := a.RDB.Get(ctx, a.Keys.ApprovalRequest(ref)).Bytes()
	if errors.Is(err, redis.Nil) {
		id, ierr := a.RDB.Get(ctx, a.Keys.ApprovalOtid(ref)).Result()
		if errors.Is(ierr, redis.Nil) {
			return nil, false, ErrNoRequest
		}
		if ierr != nil {
			return nil, false, ierr
		}
		b, err = a.RDB.Get(ctx, a.Keys.ApprovalRequest(id)).Bytes()
		if errors.Is(err, redis.Nil) {
			return nil, true, ErrNoRequest
		}
	}
	return b, false, err
}

// Pending returns the task id of the request the chat (agent, scope) waits
// on ("" for none).
func (a Approvals) Pending(ctx context.Context, agentID, scope string) (string, error) {
	id, err := a.RDB.Get(ctx, a.Keys.ApprovalPending(agentID, scope)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// Answered writes the answered request's record (its keys living ttl) and
// clears its chat's pending request while it is this one.
func (a Approvals) Answered(ctx context.Context, requestTaskID, agentID, scope string, record []byte, ttl time.Duration) error {
	if err := a.RDB.Set(ctx, a.Keys.ApprovalRequest(requestTaskID), record, ttl).Err(); err != nil {
		return err
	}
	return ClearPending.Run(ctx, a.RDB, []string{a.Keys.ApprovalPending(agentID, scope)}, requestTaskID).Err()
}
