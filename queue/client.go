package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/redisopt"
	"github.com/lettaq/lettaq/ordering"
)

// defaultQueue is the Asynq queue turns go to unless configured otherwise.
const defaultQueue = "lettaq"

// TaskMaxRetry is the Asynq max retry of a turn task whose failed attempts
// are retried maxRetry times (negative: none): one more, which the worker
// keeps for put-backs. A turn that waits for a busy thread is put back
// through Asynq's retry (one that waits for its conversation or an
// approval answer parks instead, see queue/internal/line, and is enqueued again
// with the retries it had left, at least this one), and Asynq
// v0.26 archives a task whose retries are used up whatever the error; the
// kept retry means a waiting turn is never archived for waiting. A producer
// in another language sets this (GET /budget answers it).
func TaskMaxRetry(maxRetry int) int { return max(maxRetry, 0) + 1 }

// ClientConfig configures a Client: give it to NewClient. Redis is required;
// the zero value of every other field takes its default.
type ClientConfig struct {
	// Redis is the Asynq connection (e.g. asynq.RedisClientOpt{Addr: …}).
	Redis asynq.RedisConnOpt
	// Budget sets the task timeout (Budget.TaskTimeout()); use the same
	// configuration as the workers. Zero value: budget.Default().
	Budget budget.Config
	// Queue, default "lettaq": with Shards > 1, the base name of the
	// shards' queues (package queue/shard).
	Queue string
	// Shards is the number of shards the deployment's chats are spread
	// over (LETTAQ_SHARDS; default 1: every turn in Queue). Each turn goes
	// to its chat's shard's queue, under a task id that names the shard
	// (shard.Layout.TaskID). Use the workers' number: Enqueue refuses to
	// work under a layout other than the deployment's recorded one
	// (*LayoutMismatchError).
	Shards int
	// MaxRetry is how many times a failed attempt is retried, default
	// DefaultMaxRetry; negative means 0 (no retry). A put-back (the turn
	// waits for its conversation, a busy thread or an approval answer) is
	// not a failure and uses none. The task's Asynq MaxRetry is one more
	// (TaskOptions): Asynq v0.26 archives a task whose retries are used up
	// whatever its handler returns, and the last is kept for put-backs.
	MaxRetry int
	// Retention of finished tasks (their result stays readable), default
	// DefaultRetention. It is also how long a duplicate delivery of the same
	// message id is recognised.
	Retention time.Duration
	// Replies, when set, receives an accepted event for each new task.
	Replies *Replies
	// Now is the clock for EnqueuedAt; default time.Now.
	Now func() time.Time
	// Ordering: each new turn joins its conversation's line just before it
	// is enqueued (on by default; Off, Scope and Config.Prefix must match
	// the workers'). Coalesce is a worker setting and is ignored here.
	Ordering Ordering
	// CancelObserver, when set, is told of each waiting turn Cancel ends
	// itself (phase waiting); the turns that workers end are told to
	// theirs.
	CancelObserver CancelObserver
}

// Client is what a producer uses: it enqueues turns (Enqueue), cancels
// them, answers approval requests and writes notices into chats. Make one
// with NewClient and share it; it is safe for concurrent use.
type Client struct {
	ac     *asynq.Client
	cfg    ClientConfig
	seq    *ordering.Sequencer   // nil: no ordering
	rdb    redis.UniversalClient // owned by the sequencer we made
	insp   *asynq.Inspector      // wakes a waiting turn (under ordering); reads a duplicate's message; finds a turn to cancel
	shards clientShards          // the queue of each turn (shards.go)
}

// EnqueueResult says what Enqueue did: follow the turn by its TaskID (the
// journal, Client.Cancel) or its Otid, and read Duplicate to tell a message
// delivered twice.
type EnqueueResult struct {
	// TaskID is the task of the turn (the existing one for a duplicate).
	TaskID string `json:"task_id"`
	// Duplicate is true when a task with this id already existed: the
	// message was delivered before, and no second turn was made.
	Duplicate bool `json:"duplicate"`
	// Queue the task is in.
	Queue string `json:"queue"`
	// Otid of the turn.
	Otid string `json:"otid"`
	// Position is the turn's 0-based place in its conversation's line (0:
	// it runs next), under ordering; -1 when the turn already finished.
	Position int `json:"position"`
}

// NewClient returns a Client: make one per process and share it. Close it
// when done.
func NewClient(cfg ClientConfig) (*Client, error) {
	if cfg.Redis == nil {
		return nil, errors.New("queue: ClientConfig.Redis is nil")
	}
	if cfg.Budget == (budget.Config{}) {
		cfg.Budget = budget.Default()
	}
	if err := cfg.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("queue: budget: %w", err)
	}
	if cfg.Queue == "" {
		cfg.Queue = defaultQueue
	}
	prefix := ""
	if cfg.Replies != nil {
		prefix = cfg.Replies.opts.Prefix
	}
	layouts, err := shardLayouts(cfg.Shards, []string{cfg.Queue}, prefix)
	if err != nil {
		return nil, err
	}
	if cfg.MaxRetry == 0 {
		cfg.MaxRetry = DefaultMaxRetry
	} else if cfg.MaxRetry < 0 {
		cfg.MaxRetry = 0
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Replies != nil {
		if cfg.Replies, err = cfg.Replies.inLayout(layouts[0]); err != nil {
			return nil, err
		}
	}
	c := &Client{cfg: cfg}
	c.shards.layout = layouts[0]
	conn := redisopt.Lean(cfg.Redis)
	if !cfg.Ordering.Off {
		seq, rdb, err := cfg.Ordering.newSequencer(conn, nil)
		if err != nil {
			return nil, err
		}
		c.seq, c.rdb = seq, rdb
	}
	c.insp = asynq.NewInspector(conn)
	c.ac = asynq.NewClient(conn)
	return c, nil
}

// Close closes the Client's connections to Redis: call it once, when the
// Client is no longer used.
func (c *Client) Close() error {
	err := errors.Join(c.ac.Close(), c.insp.Close())
	if c.rdb != nil {
		err = errors.Join(err, c.rdb.Close())
	}
	return err
}

// TaskOptions returns the Asynq options Enqueue uses for a task with id
// (as Enqueue makes it: its queue is the shard the id names).
// A client in another language should set the same (see the package doc):
// its MaxRetry is ClientConfig.MaxRetry + 1 (the last retry is kept for
// put-backs: see ClientConfig.MaxRetry).
func (c *Client) TaskOptions(taskID string) []asynq.Option {
	return []asynq.Option{
		asynq.TaskID(taskID),
		asynq.Queue(c.shards.queueOf(taskID)),
		asynq.MaxRetry(TaskMaxRetry(c.cfg.MaxRetry)),
		asynq.Timeout(c.cfg.Budget.TaskTimeout()),
		asynq.Retention(c.cfg.Retention),
	}
}

// Enqueue validates m and makes it a task. A message whose MessageID was
// enqueued before (and whose task is still retained) is not enqueued
// again: the result names the existing task with Duplicate set; with
// another text (or images) it is refused with a *MessageIDConflictError.
// Validation errors are *ValidationError.
//
// Under ordering, the task first joins its conversation's line (a
// duplicate joins again: that is idempotent and keeps its place), and the
// accepted event carries its position. A turn with turns ahead of it is
// enqueued as a scheduled task (Asynq's Scheduled state: waiting, not
// failed): the turn ahead of it, when it ends, moves it to pending
// (ordering.Sequencer.Wake); its process-at time (Ordering.WaitCheck
// ahead, 10 minutes by default) is only the safety net. If the enqueue fails, a task that this
// call put in the line leaves it again (a duplicate's place is the
// original's, and stays); if the join fails, nothing is enqueued.
//
// With shards, the turn goes to its chat's shard (ClientConfig.Shards);
// the first Enqueue of a Client checks the deployment's recorded layout
// and refuses with a *LayoutMismatchError when it is another.
func (c *Client) Enqueue(ctx context.Context, m Message) (EnqueueResult, error) {
	if err := c.claim(ctx); err != nil {
		return EnqueueResult{}, err
	}
	stamped := m.EnqueuedAt.IsZero() // the payload is this call's alone (its time)
	if stamped {
		m.EnqueuedAt = c.cfg.Now().UTC()
	}
	b, err := EncodePayload(m)
	if err != nil {
		return EnqueueResult{}, err
	}
	sh := c.shards.layout.Of(m.Conversation.Integration, m.Conversation.ChatID)
	id := c.shards.layout.TaskID(sh, TaskIDFor(m))
	qname := c.shards.layout.Queue(sh)
	res := EnqueueResult{TaskID: id, Queue: qname, Otid: OtidFor(m, id)}
	opts := c.TaskOptions(id)
	var key string
	var joined bool // this call put the task in the line
	if c.seq != nil {
		key = c.cfg.Ordering.Key(m)
		pos, added, err := c.seq.JoinAdded(ctx, key, id)
		if err != nil {
			return EnqueueResult{}, fmt.Errorf("queue: could not join %s to its conversation's line (nothing enqueued): %w", id, err)
		}
		res.Position, joined = pos, added
		if pos > 0 {
			opts = append(opts, asynq.ProcessIn(c.cfg.Ordering.recheck()))
		}
	}
	_, err = c.ac.EnqueueContext(ctx, asynq.NewTask(TaskType, b), opts...)
	switch {
	case errors.Is(err, asynq.ErrTaskIDConflict):
		dup, cerr := c.existingTask(m, id, b, stamped)
		if cerr != nil {
			if joined { // this call put the id back in a line the first message's task had left
				_ = c.seq.Remove(context.WithoutCancel(ctx), key, id)
			}
			return EnqueueResult{}, cerr
		}
		res.Duplicate = dup
	case err != nil:
		if joined {
			c.leaveLine(ctx, key, id)
		}
		return EnqueueResult{}, fmt.Errorf("queue: enqueue %s: %w", id, err)
	}
	if c.seq != nil && res.Position > 0 && !res.Duplicate {
		// The turns ahead may all have ended between the join and the
		// enqueue (the last one found no task to wake): then run it now.
		if pos, err := c.seq.Position(ctx, key, id); err == nil && pos == 0 {
			_ = c.insp.RunTask(qname, id)
		}
	}
	if c.cfg.Replies != nil && !res.Duplicate {
		// Best effort: the worker writes it at the first attempt otherwise.
		_, _ = c.cfg.Replies.EmitAcceptedOnce(ctx, m.Conversation, ReplyEvent{
			TaskID: id, Otid: res.Otid, MessageID: m.MessageID, Position: max(res.Position, 0)})
	}
	return res, nil
}

// leaveLine undoes the join of an Enqueue whose enqueue failed: the task
// leaves the line only when this call put it there (a duplicate's join
// changed nothing: the place is the original task's) and the task is known
// not to exist (an enqueue whose reply was lost may have happened). When
// that is not known, the place stays: a head whose task does not exist is
// removed by the next turn's acquire once Config.DeadHeadGrace has passed.
func (c *Client) leaveLine(ctx context.Context, key, id string) {
	qname := c.shards.queueOf(id)
	if _, err := c.insp.GetTaskInfo(qname, id); !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
		return
	}
	_ = c.waker(c.insp).Leave(context.WithoutCancel(ctx), qname, key, id)
}
