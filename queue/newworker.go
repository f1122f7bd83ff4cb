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
	layoutPrefix := cfg.RepliesOptions.Prefix
	if cfg.Replies != nil {
		layoutPrefix = cfg.Replies.opts.Prefix
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
	if cfg.TaskCheckInterval <= 0 {
		cfg.TaskCheckInterval = 100 * time.Millisecond
	}
	if cfg.DelayedTaskCheckInterval <= 0 {
		cfg.DelayedTaskCheckInterval = time.Second
	}
	if cfg.HeartbeatInterval <= 0 {
		cfg.HeartbeatInterval = defaultHeartbeatInterval
	}
	if cfg.StuckRetryDelay <= 0 {
		cfg.StuckRetryDelay = time.Second
	}
	if cfg.MaxReplyBytes <= 0 {
		cfg.MaxReplyBytes = DefaultMaxReplyBytes
	}
	if !cfg.Ordering.Off && cfg.DelayedTaskCheckInterval > time.Second {
		cfg.DelayedTaskCheckInterval = time.Second
	}
	if cfg.Ordering.MaxCoalesce <= 0 {
		cfg.Ordering.MaxCoalesce = defaultMaxCoalesce
	}
	if len(cfg.Ordering.Coalesce) > 0 && !cfg.Ordering.Off && cfg.Ordering.Scope != ordering.ScopeConversation {
		return nil, errors.New("queue: Ordering.Coalesce needs the conversation scope (an agent's line mixes chats)")
	}
	w := &Worker{cfg: cfg, log: cfg.Logger, obs: cfg.Observer, redisConns: redisConns{conn: redisopt.Lean(cfg.Redis)},
		layouts: layouts}
	l, err := newLetta(cfg.Letta,
		agentclient.Config{BaseURL: cfg.LettaURL, APIKey: cfg.LettaAPIKey,
			RequestTimeout: cfg.Budget.RequestTimeout, StreamTransport: cfg.StreamTransport},
		continuation.Config{Budget: cfg.Budget, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	w.letta = l
	if cfg.Replies == nil {
		if err := checkClusterPrefix(cfg.Redis, "reply", cfg.RepliesOptions.Prefix); err != nil {
			return nil, err
		}
	}
	if cfg.Journal == nil {
		if err := checkClusterPrefix(cfg.Redis, "journal", cfg.JournalOptions.Prefix); err != nil {
			return nil, err
		}
	}
	if err := w.dialRedis(cfg.RedisClient, cfg.Replies == nil || cfg.Journal == nil); err != nil {
		return nil, err
	}
	w.replies = cfg.Replies
	if w.replies == nil {
		o := cfg.RepliesOptions
		if o.PartLimits == nil {
			o.PartLimits = cfg.ReplyPartLimits
		}
		w.replies = NewReplies(w.rdb, o)
	}
	w.journal = cfg.Journal
	if w.journal == nil {
		w.journal = NewJournal(w.rdb, cfg.JournalOptions)
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
	mode, err := ParseThreadMode(string(cfg.ThreadMode))
	if err != nil {
		w.closeRedis()
		return nil, fmt.Errorf("queue: %w", err)
	}
	w.cfg.ThreadMode = mode
	pol, err := ParseApprovalPolicy(string(cfg.ApprovalPolicy))
	if err != nil {
		w.closeRedis()
		return nil, fmt.Errorf("queue: %w", err)
	}
	w.cfg.ApprovalPolicy = pol
	if w.cfg.ApprovalTimeout <= 0 {
		w.cfg.ApprovalTimeout = defaultApprovalTimeout
	}
	if w.cfg.ApprovalTimeout > MaxApprovalTimeout {
		w.closeRedis()
		return nil, fmt.Errorf("queue: ApprovalTimeout %v is more than %v", w.cfg.ApprovalTimeout, MaxApprovalTimeout)
	}
	w.approvals = newApprovalPart(w)
	w.lines = newLines(w)
	w.writer = progress.NewWriter(w.replies.rdb, w.replies.st, w.replies.complete)
	w.writer.Tripped = w.health.Tripped
	if w.cfg.TakeoverAfter == 0 {
		w.cfg.TakeoverAfter = DefaultTakeoverAfter
	}
	if w.cfg.TakeoverAfter > 0 {
		if w.cfg.TakeoverBeat <= 0 {
			w.cfg.TakeoverBeat = defaultTakeoverBeat
		}
		w.cfg.TakeoverBeat = min(w.cfg.TakeoverBeat, w.cfg.TakeoverAfter/3)
		w.tk = newTakeover(w)
	}
	threads := &attempt.Threads{Mode: mode, RDB: w.replies.rdb, Keys: w.replies.keys(), Client: w.client, Lock: w.ord == nil,
		LockTTL: w.cfg.Budget.ThreadResolution() + attempt.ThreadLockSlack}
	w.attempts = &attempt.Parts{Cfg: attempt.Config{WorkerID: w.cfg.WorkerID, Budget: w.cfg.Budget,
		HeartbeatInterval: w.cfg.HeartbeatInterval, DeltaMaxAge: w.cfg.DeltaMaxAge, StuckRetryDelay: w.cfg.StuckRetryDelay,
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
