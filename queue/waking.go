package queue

import (
	"context"
	"errors"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/line"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// The Client's side of the chats' lines: the parking records of the turns
// that wait, and the waker.

// waker is the client's (a cancel wakes the turn behind the one it takes
// out of its line: queue/internal/line): it wakes through insp (the
// client's, or one made for the call).
func (c *Client) waker(insp *asynq.Inspector) line.Waker {
	k := line.Waker{Insp: insp, Seq: c.seq}
	if c.cfg.Replies != nil {
		p := c.parking()
		k.Park = &p
	}
	return k
}

// parking is the store of parked turns (waiting turns between their
// revoked task and its re-enqueue: see queue/internal/line).
func (c *Client) parking() store.Parking {
	return store.Parking{RDB: c.cfg.Replies.rdb, Keys: c.cfg.Replies.keys()}
}

// parked returns the parking record of a turn that is in no Asynq queue
// because it is parked (nil when it is not, or its record is dropped).
func (c *Client) parked(ctx context.Context, id string) (*store.Parked, error) {
	p, err := c.parking().Get(ctx, id)
	switch {
	case errors.Is(err, store.ErrNotParked):
		return nil, nil
	case err != nil:
		return nil, err
	case p.Dropped:
		return nil, nil
	}
	return &p, nil
}
