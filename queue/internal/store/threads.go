package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Threads keeps the Letta conversation id of each lettaq conversation
// (named by its hash: of the agent and the conversation), and the short
// lock that serialises creating one.
type Threads struct {
	RDB  redis.UniversalClient
	Keys Keys
}

// Known returns the conversation id kept for hash ("" when none).
func (th Threads) Known(ctx context.Context, c ThreadOf) (string, error) {
	id, err := th.RDB.Get(ctx, th.Keys.Thread(c)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	return id, err
}

// Keep stores the conversation id of hash; it never expires.
func (th Threads) Keep(ctx context.Context, c ThreadOf, id string) error {
	return th.RDB.Set(ctx, th.Keys.Thread(c), id, 0).Err()
}

// KeepOp is Keep as an op, for a caller that sends it with other writes.
func (th Threads) KeepOp(c ThreadOf, id string) Op {
	return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
		return p.Set(ctx, th.Keys.Thread(c), id, 0).Err
	}
}

// Lock takes hash's creation lock for at most ttl, waiting for it (bounded
// by ctx), and returns its release.
func (th Threads) Lock(ctx context.Context, c ThreadOf, ttl time.Duration) (unlock func(), err error) {
	key := th.Keys.ThreadLock(c)
	var b [16]byte
	_, _ = rand.Read(b[:])
	token := hex.EncodeToString(b[:])
	wait := 20 * time.Millisecond
	for {
		ok, err := th.RDB.SetNX(ctx, key, token, ttl).Result()
		if err != nil {
			return nil, err
		}
		if !ok {
			// Our own SET NX, sent again by go-redis after its reply was
			// lost, finds the lock it took: it is ours.
			held, err := th.RDB.Get(ctx, key).Result()
			if err != nil && !errors.Is(err, redis.Nil) {
				return nil, err
			}
			ok = held == token
		}
		if ok {
			return func() {
				uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
				defer cancel()
				_ = Unlock.Run(uctx, th.RDB, []string{key}, token).Err()
			}, nil
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}
