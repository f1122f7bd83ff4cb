package approval

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// Store keeps the pending approvals in Redis (store.Approvals), as the client that
// answers them and the worker that makes them read them.
type Store struct {
	st  store.Approvals
	ttl time.Duration // the replies' TTL: how long a request's keys live past its expiry
}

// NewStore is the store of the approvals under keys (the reply streams'), whose keys live
// ttl past a request's expiry.
func NewStore(rdb redis.UniversalClient, keys store.Keys, ttl time.Duration) *Store {
	return &Store{st: store.Approvals{RDB: rdb, Keys: keys}, ttl: ttl}
}

// Redis is the Redis side of the store (for an attempt's start reads).
func (s *Store) Redis() store.Approvals { return s.st }

// keyTTL is how long p's keys live: the replies' TTL past p's expiry (saturating at the
// largest Duration, never wrapping negative: a negative TTL is a key without expiry).
func (s *Store) keyTTL(p *Pending) time.Duration {
	ttl := s.ttl
	if !p.ExpiresAt.IsZero() {
		if until := time.Until(p.ExpiresAt); until > 0 {
			if ttl > math.MaxInt64-until {
				return math.MaxInt64
			}
			ttl += until
		}
	}
	return ttl
}

// Save records p as its chat's unanswered request.
func (s *Store) Save(ctx context.Context, p *Pending) error {
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.st.Save(ctx, p.RequestTaskID, p.Otid, p.AgentID, p.Scope, b, s.keyTTL(p))
}

// Get returns the request of task id or otid ref; ErrNoRequest (wrapped) when none is
// known.
func (s *Store) Get(ctx context.Context, ref string) (*Pending, error) {
	b, byOtid, err := s.st.Record(ctx, ref)
	switch {
	case errors.Is(err, store.ErrNoRequest) && byOtid:
		return nil, fmt.Errorf("%w with otid %q (expired)", ErrNoRequest, ref)
	case errors.Is(err, store.ErrNoRequest):
		return nil, fmt.Errorf("%w with task id or otid %q (unknown, or expired)", ErrNoRequest, ref)
	case err != nil:
		return nil, err
	}
	var p Pending
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("approval request %s: %w", ref, err)
	}
	return &p, nil
}

// pendingOf is the thread's unanswered request, or nil, once the thread's pending key was
// read (id and err of its GET).
func (s *Store) pendingOf(ctx context.Context, id string, err error) (*Pending, error) {
	if errors.Is(err, redis.Nil) || (err == nil && id == "") {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	p, err := s.Get(ctx, id)
	if errors.Is(err, ErrNoRequest) {
		return nil, nil
	}
	if err != nil || p.AnsweredBy != "" {
		return nil, err
	}
	return p, nil
}

// Answered records that answer task answerTaskID ended the request p (ans nil: its
// decision is not known).
func (s *Store) Answered(ctx context.Context, p *Pending, answerTaskID string, ans *record.Answer, at time.Time) error {
	p.AnsweredBy, p.AnsweredAt = answerTaskID, at.UTC()
	if ans != nil {
		p.Decision, p.Cause = Summary(ans.Decisions), ans.Cause
	}
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.st.Answered(ctx, p.RequestTaskID, p.AgentID, p.Scope, b, s.ttl)
}
