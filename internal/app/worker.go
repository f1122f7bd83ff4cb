package app

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/queueweights"
	"github.com/lettaq/lettaq/internal/redisopt"
)

// Running is a started worker.
type Running struct {
	Config    WorkerSettings
	HTTPAddr  string // the listener's actual address, "" when off
	RedisAddr string // dev mode: the in-memory Redis
	LettaURL  string // the Letta server in use (dev mode: the simulator)
	Dev       *DevEnv
	Logger    *slog.Logger

	done  chan struct{}
	err   error
	ready atomic.Bool
}

// Done is closed when the worker has stopped; Err then tells why.
func (r *Running) Done() <-chan struct{} { return r.done }

// Err is the reason the worker stopped (nil after a clean shutdown).
func (r *Running) Err() error { <-r.done; return r.err }

// RunWorker is the worker command: it parses args and the environment, runs until SIGTERM or
// SIGINT (or ctx ends) and returns the exit code.
func RunWorker(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "healthcheck" {
		return RunHealthcheck(ctx, args[1:], getenv, stdout, stderr)
	}
	if len(args) > 0 && args[0] == "check-config" {
		return RunCheckConfig(args[1:], getenv, stdout, stderr)
	}
	cfg, err := ParseWorkerSettings(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	if err != nil {
		// A misspelled variable may be why the configuration is wrong: say so first.
		warnUnknownVars(NewLogger(stderr, strings.ToLower(getenv("LETTAQ_LOG_FORMAT")), "info"), getenv)
		fmt.Fprintf(stderr, "worker: configuration error:\n%v\n", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	SetRedisLogger(logger, slog.LevelWarn) // go-redis's own lines into the same log, not plain text
	warnUnknownVars(logger, getenv)
	if limit, from := applyMemoryLimit(getenv); from != "" {
		logger.Info("GC memory limit", "bytes", limit, "from", from)
	}
	r, err := StartWorker(ctx, cfg, logger, stdout)
	if err != nil {
		logger.Error("worker did not start", "err", err)
		var ce *ConfigError
		if errors.As(err, &ce) {
			return ExitUsage
		}
		return ExitFailed
	}
	<-r.Done()
	if r.err != nil {
		logger.Error("worker stopped", "err", r.err)
		var ce *ConfigError
		if errors.As(r.err, &ce) {
			return ExitUsage
		}
		return ExitFailed
	}
	return ExitOK
}

// StartWorker starts dev mode's infrastructure (with cfg.Dev), the HTTP listener and the queue
// worker, and returns at once (within redisPingWait, 2 s, when Redis does not answer: the
// worker then waits for it in the background, not ready meanwhile). The worker stops when ctx ends: it stops taking turns and lets
// the running ones finish within cfg.ShutdownTimeout. stdout receives dev mode's greeting.
func StartWorker(ctx context.Context, cfg WorkerSettings, logger *slog.Logger, stdout io.Writer) (*Running, error) {
	r := &Running{Config: cfg, Logger: logger, done: make(chan struct{}), LettaURL: cfg.LettaBaseURL}
	var connOpt asynq.RedisConnOpt
	if cfg.Dev {
		dev, err := StartDev(cfg.DevRedisAddr, cfg.DevLettaAddr)
		if err != nil {
			return nil, &ConfigError{Errs: []error{err}}
		}
		r.Dev, r.RedisAddr, r.LettaURL = dev, dev.RedisAddr, dev.LettaURL
		connOpt = asynq.RedisClientOpt{Addr: dev.RedisAddr}
	} else {
		var err error
		if connOpt, err = cfg.RedisConnOpt(); err != nil {
			return nil, &ConfigError{Errs: []error{err}}
		}
		if err := checkClusterKeyPrefix(cfg.KeyPrefix, cfg.RedisClusterAddrs); err != nil {
			return nil, &ConfigError{Errs: []error{err}}
		}
	}
	cleanup := func() {
		if r.Dev != nil {
			r.Dev.Close()
		}
	}
	rdb, ok := redisopt.Lean(connOpt).MakeRedisClient().(redis.UniversalClient)
	if !ok {
		cleanup()
		return nil, fmt.Errorf("unsupported Redis connection %T", connOpt)
	}
	logger.Info("lettaq worker starting",
		"worker_id", cfg.WorkerID,
		"redis", describeRedis(connOpt),
		"letta", redactURL(r.LettaURL),
		"letta_api_key", setOrUnset(cfg.LettaAPIKey),
		"concurrency", cfg.Concurrency,
		"queues", queueweights.String(cfg.Queues),
		"thread_mode", string(cfg.ThreadMode),
		"ordering", cfg.Ordering,
		"task_check_interval", cfg.TaskCheckInterval,
		"shutdown_timeout", cfg.ShutdownTimeout,
		"http", cfg.HTTPAddr,
		"http_token", setOrUnset(cfg.HTTPToken),
		"monitor", map[bool]string{true: "writable", false: "read-only"}[cfg.MonitorWritable],
		"budget", cfg.Budget,
		"dev", cfg.Dev)
	for _, w := range cfg.Budget.Warnings() {
		if cfg.Dev {
			logger.Debug("budget warning (expected in dev mode)", "warning", w)
		} else {
			logger.Warn("budget", "warning", w)
		}
	}

	inspector := asynq.NewInspectorFromRedisClient(rdb)
	metrics := NewMetrics(inspector)
	q, err := newQueueRunner(cfg, connOpt, rdb, r.LettaURL, metrics, logger)
	if err != nil {
		_ = rdb.Close()
		cleanup()
		return nil, err
	}

	var srv *http.Server
	var closeMon func()
	if cfg.HTTPAddr != "off" {
		addr := cfg.HTTPAddr
		ln, err := net.Listen("tcp", addr)
		if err != nil && cfg.Dev {
			ln, err = net.Listen("tcp", "127.0.0.1:0") // dev mode: any free port will do
		}
		if err != nil {
			_ = rdb.Close()
			cleanup()
			return nil, &ConfigError{Errs: []error{fmt.Errorf("LETTAQ_HTTP_ADDR=%q: %v", addr, err)}}
		}
		var h http.Handler
		var chat http.Handler
		if cfg.Dev {
			chat = newWebChat(webChatOptions{Redis: rdb, Prefix: cfg.KeyPrefix, Client: q.client, Replies: q.replies,
				Agents: devAgents(r.Dev), JournalURL: "/turns/", Logger: logger})
		}
		budgetInfo := NewBudgetInfo(cfg)
		h, closeMon = NewHTTPHandler(HTTPOptions{
			Token: cfg.HTTPToken, Redis: rdb, ProbeWrite: q.w.ProbeWrite, RedisConnOpt: connOpt, MonitorWritable: cfg.MonitorWritable,
			Metrics: metrics, Enqueue: q.enqueueHandler(), Cancel: q.cancelHandler(), Notify: q.notifyHandler(), Logger: logger, Budget: &budgetInfo,
			Turns: turnsHandler(inspector, q.w.Journal(), queueNames(budgetInfo.Queues), q.w.WaitingFinder()), // (the shards' queues)
			Chat:  chat,
			Ready: func() error {
				if !r.ready.Load() {
					return errors.New("not taking turns")
				}
				return q.w.Ready() // its writes and Asynq's dequeue and leases
			},
		})
		srv = NewHTTPServer(h, HTTPServerOptions{IdleTimeout: cfg.HTTPIdleTimeout, BodyTimeout: cfg.HTTPBodyTimeout})
		r.HTTPAddr = ln.Addr().String()
		go func() { _ = srv.Serve(ln) }()
		logger.Info("http listening", "addr", r.HTTPAddr, "monitor", "http://"+r.HTTPAddr+"/monitor/", "metrics", "http://"+r.HTTPAddr+"/metrics")
	}

	var devRel *devRelay
	if cfg.Dev {
		if devRel, err = startDevRelay(ctx, cfg, r.Dev, logger); err != nil {
			if srv != nil {
				_ = srv.Close()
				closeMon()
			}
			q.close()
			_ = rdb.Close()
			cleanup()
			return nil, err
		}
	}
	if cfg.Dev && stdout != nil {
		var more func(io.Writer)
		if devRel != nil {
			more = devRel.greet
		}
		printDevGreeting(stdout, r, more)
	}

	// Not ready (/readyz 503) and no "worker started" until Redis answers: a Redis that answers
	// now makes the worker ready before StartWorker returns; else it is waited for below.
	pctx, cancel := context.WithTimeout(ctx, redisPingWait)
	pingErr := rdb.Ping(pctx).Err()
	cancel()
	r.ready.Store(pingErr == nil)
	go func() {
		defer close(r.done)
		up := pingErr == nil
		if !up {
			werr := waitForRedis(ctx, rdb, redisAddr(connOpt), logger, pingErr)
			up = werr == nil
			if _, ok := werr.(*ConfigError); ok {
				r.err = werr // the worker exits 2: its Redis refuses its credentials
			}
		}
		if up {
			logPersistence(ctx, rdb, logger, cfg.Dev)
			logRedisVersion(ctx, rdb, logger, cfg.Dev)
			r.ready.Store(true)
			r.err = q.run(ctx)
			r.ready.Store(false)
		} else {
			q.close() // stopped while waiting for Redis
		}
		if srv != nil {
			sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = srv.Shutdown(sctx)
			cancel()
		}
		if closeMon != nil {
			closeMon()
		}
		if devRel != nil {
			<-devRel.done // ctx has ended: the relay stops before its Redis closes
		}
		_ = inspector.Close()
		_ = rdb.Close()
		cleanup()
		logger.Info("lettaq worker stopped")
	}()
	return r, nil
}

func setOrUnset(s string) string {
	if s == "" {
		return "unset"
	}
	return "set"
}

func describeRedis(o asynq.RedisConnOpt) string {
	switch o := o.(type) {
	case asynq.RedisClientOpt:
		tls := ""
		if o.TLSConfig != nil {
			tls = " (TLS)"
		}
		return fmt.Sprintf("%s db %d%s", o.Addr, o.DB, tls)
	case asynq.RedisFailoverClientOpt:
		return fmt.Sprintf("sentinel master %q via %v", o.MasterName, o.SentinelAddrs)
	case asynq.RedisClusterClientOpt:
		return fmt.Sprintf("cluster %v", o.Addrs)
	}
	return fmt.Sprintf("%T", o)
}

// printDevGreeting prints dev mode's greeting; more, when set, adds a dev
// relay's part before the last line.
func printDevGreeting(w io.Writer, r *Running, more func(io.Writer)) {
	fmt.Fprintf(w, `
lettaq dev mode: everything runs in this process.
  Redis (in memory)    %s
  Letta simulator      %s   (agents by name: %s; see GET /v1/agents/)
`, r.RedisAddr, r.LettaURL, strings.Join(DemoAgentNames, ", "))
	if r.HTTPAddr != "" {
		fmt.Fprintf(w, "  Web chat             http://%s/chat/\n", r.HTTPAddr)
		fmt.Fprintf(w, "  Monitor              http://%s/monitor/\n  Metrics              http://%s/metrics\n", r.HTTPAddr, r.HTTPAddr)
	}
	// The commands must reach this worker as printed: its Redis address and key prefix.
	o := enqueueOpts{dev: true, devRedis: r.RedisAddr, prefix: r.Config.KeyPrefix}
	fmt.Fprintf(w, `
In another terminal, try:
  %[1]s --wait "hello"                                  # a quick answer
  %[1]s --wait --agent %[2]s "what is lettaq?"   # a tool call first
  %[1]s --wait --agent %[3]s "think hard"         # outlives the 8s stream clock: watch it recover
  %[1]s --wait --agent %[4]s "email the team" # asks approval for a tool call (exit 4)
  %[1]s journal recent                                  # what happened, turn by turn
Messages may carry simulator directives, e.g. "[[sim think=30s]] hi" or "[[sim disconnect_after=2]] hi".
`, o.commandLine(greetingEnqueue(os.Args[0])), DemoAgentTools, DemoAgentSlow, DemoAgentApproval)
	if more != nil {
		more(w)
	}
	fmt.Fprint(w, "Stop with Ctrl-C.\n\n")
}
