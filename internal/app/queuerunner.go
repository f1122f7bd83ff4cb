package app

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/httpapi"
	"github.com/lettaq/lettaq/queue/shard"
)

// Metrics is the queue's Observer.
var _ queue.Observer = (*Metrics)(nil)

// queueRunner is the queue worker plus the client behind /enqueue.
type queueRunner struct {
	w       *queue.Worker
	client  *queue.Client
	letta   *agentclient.Client
	replies *queue.Replies
}

func newQueueRunner(cfg WorkerSettings, connOpt asynq.RedisConnOpt, rdb redis.UniversalClient, lettaURL string, m *Metrics, logger *slog.Logger) (*queueRunner, error) {
	letta, err := agentclient.New(agentclient.Config{
		BaseURL: lettaURL, APIKey: cfg.LettaAPIKey, RequestTimeout: cfg.Budget.RequestTimeout, StreamTransport: cfg.StreamTransport,
		MaxEventBytes: cfg.Limits.Event, MaxResponseBytes: cfg.Limits.Response, MaxTranscriptBytes: cfg.Limits.Transcript,
		Clocks: agentclient.Clocks{
			Connect: cfg.Budget.ConnectTimeout, Stall: cfg.Budget.StallTimeout, Total: cfg.Budget.StreamTotal,
			ContentIdle: contentIdle(cfg.Budget.ContentIdleNotice), StopGrace: cfg.Budget.StopGrace,
		},
	})
	if err != nil {
		return nil, &ConfigError{Errs: []error{err}}
	}
	ord := queueOrdering(cfg.Ordering, cfg.KeyPrefix)
	ord.Config.Lease = cfg.OrderingLease
	ord.WaitCheck = cfg.WaitCheck
	ord.Coalesce = cfg.Coalesce
	if len(ord.Coalesce) > 0 && cfg.Ordering != "conversation" {
		return nil, &ConfigError{Errs: []error{errors.New("LETTAQ_COALESCE needs LETTAQ_ORDERING=conversation")}}
	}
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: cfg.KeyPrefix, StreamTTL: cfg.repliesStreamTTL()})
	journal := queue.NewJournal(rdb, queue.JournalOptions{Prefix: cfg.KeyPrefix, Retention: cfg.JournalRetention})
	w, err := queue.NewWorker(queue.WorkerConfig{
		Redis:           connOpt,
		Letta:           queue.LettaConnection{Client: letta},
		Budget:          cfg.Budget,
		Concurrency:     cfg.Concurrency,
		Queues:          cfg.Queues,
		Shards:          cfg.Shards,
		ShutdownTimeout: cfg.ShutdownTimeout,
		Logger:          logger,
		WorkerID:        cfg.WorkerID,
		Stores:          queue.WorkerStores{Replies: replies, Journal: journal, RedisClient: rdb},
		Observer:        m,
		Timing: queue.WorkerTiming{TaskCheckInterval: cfg.TaskCheckInterval, HeartbeatInterval: cfg.HeartbeatInterval,
			DeltaMaxAge: deltaMaxAge(cfg.Dev)},
		Ordering:      ord,
		Takeover:      queue.FastTakeover{After: takeoverAfter(cfg.TakeoverAfter)},
		ThreadMode:    cfg.ThreadMode,
		Approvals:     queue.ApprovalRules{Policy: cfg.ApprovalPolicy, Timeout: cfg.ApprovalTimeout},
		MaxReplyBytes: cfg.Limits.Reply,
	})
	if err != nil {
		return nil, err
	}
	if cfg.ThreadMode == queue.ThreadDefault && cfg.Ordering == "conversation" {
		logger.Warn("LETTAQ_THREAD_MODE=default with LETTAQ_ORDERING=conversation: the chats of an agent share its one thread, which takes one run at a time; their turns will wait on each other as busy (set LETTAQ_ORDERING=agent)")
	}
	q := &queueRunner{w: w, letta: letta, replies: replies}
	// /enqueue puts turns on the worker's first queue by weight.
	client, err := queue.NewClient(queue.ClientConfig{Redis: connOpt, Budget: cfg.Budget,
		Queue: firstQueue(cfg.Queues), Shards: cfg.Shards, MaxRetry: maxRetry(cfg.MaxRetry), Replies: replies, Ordering: ord,
		CancelObserver: m})
	if err != nil {
		return nil, err
	}
	q.client = client
	return q, nil
}

// queueOrdering maps LETTAQ_ORDERING (conversation, agent, off; "" is
// conversation) to the queue's setting, with the ordering keys under the
// key prefix (its braces dropped: the ordering keys carry their own hash
// tag).
func queueOrdering(mode, keyPrefix string) queue.Ordering {
	o := queue.Ordering{Config: ordering.Config{Prefix: queue.OrderingPrefix(keyPrefix)}}
	switch mode {
	case "off":
		o.Off = true
	case "agent":
		o.Scope = ordering.ScopeAgent
	}
	return o
}

// deltaMaxAge is how long answer text waits for an answer_delta: the queue's default, or
// DevDeltaMaxAge in dev mode, so the demo agents' answers visibly grow.
func deltaMaxAge(dev bool) time.Duration {
	if dev {
		return DevDeltaMaxAge
	}
	return 0
}

// contentIdle maps the budget's "0 disables" to the client's "negative disables".
func contentIdle(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

func maxRetry(n int) int {
	if n == 0 {
		return -1 // queue.ClientConfig: negative means no retry, 0 means its default
	}
	return n
}

// firstQueue is the queue with the highest weight (ties: the first by name).
func firstQueue(qs map[string]int) string {
	best, bw := "", -1
	for name, w := range qs {
		if w > bw || (w == bw && name < best) {
			best, bw = name, w
		}
	}
	return best
}

func (q *queueRunner) enqueueHandler() http.Handler {
	return enqueueHTTPHandler(httpapi.EnqueueHandler(q.client))
}

func (q *queueRunner) cancelHandler() http.Handler { return httpapi.CancelHandler(q.client) }

func (q *queueRunner) notifyHandler() http.Handler { return httpapi.NotifyHandler(q.client) }

// close releases what run would have (the worker stopped before it ran).
func (q *queueRunner) close() {
	_ = q.client.Close()
	q.letta.CloseIdleConnections()
}

// run runs the worker until ctx ends. A deployment whose recorded shard layout is not this
// configuration's is a configuration error (exit 2: restarting changes nothing).
func (q *queueRunner) run(ctx context.Context) error {
	defer q.letta.CloseIdleConnections() // once the turns are over
	defer q.client.Close()
	err := q.w.Run(ctx)
	if me := (*shard.MismatchError)(nil); errors.As(err, &me) {
		return &ConfigError{Errs: []error{err}}
	}
	return err
}

// takeoverAfter maps LETTAQ_TAKEOVER_AFTER to WorkerConfig.Takeover.After
// (0 there is the default; off is negative).
func takeoverAfter(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}
