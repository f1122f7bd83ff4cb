package queue

import (
	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/queue/internal/line"
)

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
