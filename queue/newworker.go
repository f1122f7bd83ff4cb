package queue

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/continuation"
	"github.com/lettaq/lettaq/internal/redisopt"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/progress"
)

// Making a worker: WorkerConfig's defaults and checks, and the parts the
// Worker is made of (worker.go has the type; run.go their start and
// stop).

// NewWorker checks cfg and returns a Worker, to Run. It does not connect
// yet.
func NewWorker(cfg WorkerConfig) (*Worker, error) {
	if cfg.Redis == nil {
		return nil, errors.New("queue: WorkerConfig.Redis is nil")
	}
	if cfg.Budget == (budget.Config{}) {
		cfg.Budget = budget.Default()
	}
	if err := cfg.Budget.Validate(); err != nil {
		return nil, fmt.Errorf("queue: budget: %w", err)
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 100
	}
	layoutPrefix := cfg.Stores.RepliesOptions.Prefix
	if cfg.Stores.Replies != nil {
		layoutPrefix = cfg.Stores.Replies.opts.Prefix
	}
	queues, layouts, err := workerQueues(cfg.Shards, cfg.Queues, layoutPrefix)
	if err != nil {
		return nil, err
	}
	cfg.Queues = queues
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.WorkerID == "" {
		h, _ := os.Hostname()
		cfg.WorkerID = fmt.Sprintf("%s:%d", h, os.Getpid())
	}
	if cfg.Observer == nil {
		cfg.Observer = NopObserver{}
	}
	cfg.Timing = cfg.Timing.withDefaults(!cfg.Ordering.Off)
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if cfg.Ordering.MaxCoalesce <= 0 {
		cfg.Ordering.MaxCoalesce = defaultMaxCoalesce
	}
	if len(cfg.Ordering.Coalesce) > 0 && !cfg.Ordering.Off && cfg.Ordering.Scope != ordering.ScopeConversation {
		return nil, errors.New("queue: Ordering.Coalesce needs the conversation scope (an agent's line mixes chats)")
	}
	w := &Worker{cfg: cfg, log: cfg.Logger, obs: cfg.Observer, redisConns: redisConns{conn: redisopt.Lean(cfg.Redis)},
		layouts: layouts}
	l, err := newLetta(cfg.Letta.Client,
		agentclient.Config{BaseURL: cfg.Letta.URL, APIKey: cfg.Letta.APIKey,
			RequestTimeout: cfg.Budget.RequestTimeout, StreamTransport: cfg.Letta.StreamTransport},
		continuation.Config{Budget: cfg.Budget, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	w.letta = l
	if cfg.Stores.Replies == nil {
		if err := checkClusterPrefix(cfg.Redis, "reply", cfg.Stores.RepliesOptions.Prefix); err != nil {
			return nil, err
		}
	}
	if cfg.Stores.Journal == nil {
		if err := checkClusterPrefix(cfg.Redis, "journal", cfg.Stores.JournalOptions.Prefix); err != nil {
			return nil, err
		}
	}
	if err := w.dialRedis(cfg.Stores.RedisClient, cfg.Stores.Replies == nil || cfg.Stores.Journal == nil); err != nil {
		return nil, err
	}
	w.replies = cfg.Stores.Replies
	if w.replies == nil {
		o := cfg.Stores.RepliesOptions
		if o.PartLimits == nil {
			o.PartLimits = cfg.Stores.ReplyPartLimits
		}
		w.replies = NewReplies(w.rdb, o)
	}
	w.journal = cfg.Stores.Journal
	if w.journal == nil {
		w.journal = NewJournal(w.rdb, cfg.Stores.JournalOptions)
	}
	if len(layouts) == 1 { // (one layout: a sharded queue, or one queue)
		if w.replies, err = w.replies.inLayout(layouts[0]); err == nil {
			w.journal, err = w.journal.inLayout(layouts[0])
		}
		if err != nil {
			w.closeRedis()
			return nil, err
		}
	}
	if !cfg.Ordering.Off {
		seq, rdb, err := cfg.Ordering.newSequencer(w.conn, w.rdb)
		if err != nil {
			w.closeRedis()
			return nil, err
		}
		w.ord = &orderer{cfg: cfg.Ordering, seq: seq, rdb: rdb, insp: asynq.NewInspector(w.conn)}
	}
	var mode ThreadMode
	if err := mode.UnmarshalText([]byte(cfg.ThreadMode)); err != nil {
		w.closeRedis()
		return nil, fmt.Errorf("queue: %w", err)
	}
	w.cfg.ThreadMode = mode
	var pol ApprovalPolicy
	if err := pol.UnmarshalText([]byte(cfg.Approvals.Policy)); err != nil {
		w.closeRedis()
		return nil, fmt.Errorf("queue: %w", err)
	}
	w.cfg.Approvals.Policy = pol
	if w.cfg.Approvals.Timeout <= 0 {
		w.cfg.Approvals.Timeout = defaultApprovalTimeout
	}
	if w.cfg.Approvals.Timeout > MaxApprovalTimeout {
		w.closeRedis()
		return nil, fmt.Errorf("queue: Approvals.Timeout %v is more than %v", w.cfg.Approvals.Timeout, MaxApprovalTimeout)
	}
	w.approvals = newApprovalPart(w)
	w.lines = newLines(w)
	w.writer = progress.NewWriter(w.replies.rdb, w.replies.st, w.replies.complete)
	w.writer.Tripped = w.health.Tripped
	w.cfg.Takeover = w.cfg.Takeover.withDefaults()
	if w.cfg.Takeover.After > 0 {
		w.tk = newTakeover(w)
	}
	threads := &attempt.Threads{Mode: mode, RDB: w.replies.rdb, Keys: w.replies.keys(), Client: w.client, Lock: w.ord == nil,
		LockTTL: w.cfg.Budget.ThreadResolution() + attempt.ThreadLockSlack}
	tm := w.cfg.Timing
	w.attempts = &attempt.Parts{Cfg: attempt.Config{WorkerID: w.cfg.WorkerID, Budget: w.cfg.Budget,
		HeartbeatInterval: tm.HeartbeatInterval, DeltaMaxAge: tm.DeltaMaxAge, StuckRetryDelay: tm.StuckRetryDelay,
		MaxReplyBytes: w.cfg.MaxReplyBytes},
		Log: w.log, Obs: w.obs, Replies: repliesView{w.replies}, Journal: journalView{w.journal},
		Stores: attempt.Stores{Replies: w.replies.st, Journal: w.journal.st, JournalRDB: w.journal.rdb, Saver: w.journal.saver},
		Writer: w.writer, Runner: w.runner, Letta: w.client, Threads: threads, Takeover: w.tk,
		AwaitRedis: w.awaitRedis,
		Trips: attempt.Trips{OneRedis: w.oneRedis(), ResultWithSave: w.rdb != nil && w.replies.rdb == w.rdb,
			StartWithLock: w.startWithLock()},
		IsFailure: w.isFailure, Permanent: &w.permanent, Lines: w.lines, Approvals: w.approvals}
	if w.ord != nil {
		w.attempts.OrderKey = w.ord.cfg.Key
	}
	w.attempts.Cancels.Records, w.attempts.Cancels.Log = w.replies.st, w.log
	return w, nil
}
