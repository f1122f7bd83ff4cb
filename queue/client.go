package queue

import (
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/redisopt"
	"github.com/lettaq/lettaq/ordering"
)

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
	// (*shard.MismatchError).
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
	// The layout is checked with the first go-redis client the Client has
	// (none: a Sequencer and Replies of the caller's own are both absent).
	c.shards.rdb, c.shards.record = c.rdb, cfg.Replies != nil
	if c.shards.rdb == nil && cfg.Replies != nil {
		c.shards.rdb = cfg.Replies.rdb
	}
	if c.shards.rdb == nil && c.seq != nil {
		c.shards.rdb = c.seq.Client()
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
