package ordering

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/evalcmd"
)

// joiner sends the Joins of concurrent callers together (group commit): a
// Join that finds no round trip of joins in flight sends at once, on its
// own goroutine, as it would alone; the Joins that come meanwhile queue,
// and go as one pipeline when it returns. So an idle client pays nothing
// for it, and a busy one (many webhooks enqueueing at once) pays one round
// trip for many joins instead of one each.
type joiner struct {
	rdb redis.UniversalClient
	mu  sync.Mutex
	// busy: a round trip of joins is in flight; callers queue.
	busy  bool
	queue []*joinCall
}

// joinCall is one queued Join: its command's arguments and, once done is
// closed, its reply.
type joinCall struct {
	args []any
	cmd  *redis.Cmd
	done chan struct{}
}

// joinBatchTimeout bounds the round trip of a batch of queued joins: it
// runs on no caller's context (each caller waits on its own), so that one
// caller's cancellation does not fail the others' joins.
const joinBatchTimeout = 10 * time.Second

// joinBatchMax bounds the joins of one round trip.
const joinBatchMax = 256

// join runs the join call of args (joinLua's, from Args) and returns its
// reply: at once when no joins are in flight, else with the joins queued
// behind them.
func (j *joiner) join(ctx context.Context, args []any) *redis.Cmd {
	j.mu.Lock()
	if j.busy {
		c := &joinCall{args: args, done: make(chan struct{})}
		j.queue = append(j.queue, c)
		j.mu.Unlock()
		select {
		case <-c.done:
			return c.cmd
		case <-ctx.Done():
			// The join may still run: as for a round trip cut short, the
			// task may be in the line without being enqueued (Acquire
			// removes such a head once DeadHeadGrace has passed).
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(ctx.Err())
			return cmd
		}
	}
	j.busy = true
	j.mu.Unlock()
	cmd := joinLua.Call(ctx, j.rdb, args)
	j.mu.Lock()
	if len(j.queue) == 0 {
		j.busy = false
		j.mu.Unlock()
		return cmd
	}
	j.mu.Unlock()
	// Others queued meanwhile: their round trips go on a goroutine of
	// their own, so that this caller returns now.
	go j.drain()
	return cmd
}

// drain sends the queued joins, a pipeline at a time, until none is left.
func (j *joiner) drain() {
	for {
		j.mu.Lock()
		batch := j.queue
		if len(batch) > joinBatchMax {
			batch = batch[:joinBatchMax:joinBatchMax]
			j.queue = append([]*joinCall(nil), j.queue[joinBatchMax:]...)
		} else {
			j.queue = nil
		}
		if len(batch) == 0 {
			j.busy = false
			j.mu.Unlock()
			return
		}
		j.mu.Unlock()
		j.send(batch)
	}
}

// send runs batch in one pipeline, and then, one at a time, any call
// Redis did not have the script for yet (NOSCRIPT).
func (j *joiner) send(batch []*joinCall) {
	ctx, cancel := context.WithTimeout(context.Background(), joinBatchTimeout)
	defer cancel()
	if len(batch) == 1 {
		batch[0].cmd = joinLua.Call(ctx, j.rdb, batch[0].args)
		close(batch[0].done)
		return
	}
	p := j.rdb.Pipeline()
	for _, c := range batch {
		c.cmd = joinLua.Cmd(ctx, c.args, true)
		_ = p.Process(ctx, c.cmd)
	}
	_, _ = p.Exec(ctx) // each command has its own error
	for _, c := range batch {
		if evalcmd.IsNoScript(c.cmd.Err()) {
			c.cmd = joinLua.Call(ctx, j.rdb, c.args)
		}
		close(c.done)
	}
}
