package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/envvar"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/shard"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
	relayslack "github.com/lettaq/lettaq/relay/slack"
	"github.com/lettaq/lettaq/relay/telegram"
	"github.com/lettaq/lettaq/relay/webchat"
)

// RelaySettings is the relay's whole configuration.
type RelaySettings struct {
	RedisURL        string
	KeyPrefix       string
	RelayID         string
	Shards          int // LETTAQ_RELAY_SHARDS: the replicas' leases
	QueueShards     int // LETTAQ_SHARDS: the workers' shards, that the turns the relay enqueues go to
	Lease           time.Duration
	Workers         int
	EditEvery       time.Duration
	AgentID         string
	LogFormat       string
	LogLevel        string
	HTTPAddr        string
	HTTPToken       string
	FakeURL         string
	FakeIntegration string
	FakePartLimit   int
	KillAt          string
	// WebAgents are the agents the web chat page offers (none: no page); WebAnyAgent also
	// takes an agent id the user types; WebJournalURL is where a turn's journal is linked.
	WebAgents     []webchat.Agent
	WebAnyAgent   bool
	WebJournalURL string
	// Budget is the workers' time budget: the turns the web chat page enqueues, and the
	// answers to approval requests, get its task timeout.
	Budget budget.Config
	// Slack is the Slack app (relayslack.go).
	Slack SlackSettings
	// Telegram is the Telegram bot (relaytelegram.go).
	Telegram TelegramSettings
	// ReplyStreamTTL is the workers' reply stream retention, for the events
	// the relay writes itself (accepted events of the turns it enqueues, and
	// cancels), as queue.RepliesOptions.StreamTTL takes it (negative: never);
	// made of journalRetention and replyStreamTTL (replyStreamTTLOf).
	ReplyStreamTTL                   time.Duration
	journalRetention, replyStreamTTL string

	// Set by dev mode's in-process relay (devrelay.go), not by a variable:
	// listening is told the HTTP listener's address once it listens, and
	// sweepEvery > 0 sweeps the reply streams that often (dev mode's
	// in-memory Redis sends no keyspace notifications).
	listening  func(addr string)
	sweepEvery time.Duration
}

type relaySetting struct {
	envvar.Var
	apply func(c *RelaySettings, raw string) error
}

// DefaultRelayHTTPAddr is the relay's listener (the worker's is 8080).
const DefaultRelayHTTPAddr = "127.0.0.1:8081"

var relaySettings = []relaySetting{
	{envvar.Var{Name: "REDIS_URL", Default: DefaultRedisURL, Help: "the Redis the workers write their reply streams to (redis://[:password@]host:port/db, rediss://)"},
		func(c *RelaySettings, raw string) error {
			if _, err := RedisConnOpt(raw, nil); err != nil {
				return errors.New(strings.TrimPrefix(err.Error(), "REDIS_URL="+strconv.Quote(redactURL(raw))+": "))
			}
			c.RedisURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_JOURNAL_RETENTION", Default: "168h", Help: "the workers': by default, how long the reply streams keep the events the relay writes itself (the accepted events of the turns it enqueues, cancels)"},
		func(c *RelaySettings, raw string) error {
			c.journalRetention = raw
			return checkRetentionSetting("LETTAQ_JOURNAL_RETENTION", raw)
		}},
	{envvar.Var{Name: "LETTAQ_REPLY_STREAM_TTL", Default: replyStreamTTLJournal, Help: `the workers': how long a reply stream keeps the events the relay writes itself, and lives after its last one ("journal": LETTAQ_JOURNAL_RETENTION's; 0: never)`},
		func(c *RelaySettings, raw string) error {
			c.replyStreamTTL = raw
			return checkRetentionSetting("LETTAQ_REPLY_STREAM_TTL", raw)
		}},
	{envvar.Var{Name: "LETTAQ_KEY_PREFIX", Default: "lettaq:", Help: "the workers' key prefix (reply streams); the relay's own keys go under it too"},
		func(c *RelaySettings, raw string) error {
			if raw == "" {
				return errors.New("must not be empty")
			}
			c.KeyPrefix = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_RELAY_ID", Default: "<hostname>-<pid>", Help: "this replica's name in the logs and in Redis (relay:replicas)"},
		func(c *RelaySettings, raw string) error { c.RelayID = raw; return nil }},
	{envvar.Var{Name: "LETTAQ_RELAY_SHARDS", Default: "64", Help: "how many shards the chats are spread over; the same on every replica; more replicas than shards leaves some idle"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.Shards, raw, 1, 4096) }},
	{envvar.Var{Name: "LETTAQ_SHARDS", Default: "1", Help: "the workers' LETTAQ_SHARDS: the web chat's messages and the approval answers the relay enqueues go to their chat's shard (the deployment's recorded layout refuses another)"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.QueueShards, raw, 1, shard.MaxShards) }},
	{envvar.Var{Name: "LETTAQ_RELAY_LEASE", Default: "5s", Help: "a replica that stops renewing its shards (every fifth of this) loses them this long after its last renewal: its chats are taken over by the others within about this"},
		func(c *RelaySettings, raw string) error { return relayDur(&c.Lease, raw, time.Second) }},
	{envvar.Var{Name: "LETTAQ_RELAY_WORKERS", Default: "32", Help: "chats one replica drains at once (platform calls wait on the network, not the CPU)"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.Workers, raw, 1, 100000) }},
	{envvar.Var{Name: "LETTAQ_RELAY_EDIT_EVERY", Default: "1s", Help: "the least time between two edits of a growing answer in one chat (Telegram: ~1 message a second per chat)"},
		func(c *RelaySettings, raw string) error { return relayDur(&c.EditEvery, raw, 100*time.Millisecond) }},
	{envvar.Var{Name: "LETTAQ_RELAY_AGENT_ID", Default: "", Help: "the agent of the chats, so that /stop also finds a turn the relay has not shown yet (a turn it shows is cancelled by its task id without it); with LETTAQ_TELEGRAM_TOKEN, the agent that answers the bot's chats (required)"},
		func(c *RelaySettings, raw string) error { c.AgentID = raw; return nil }},
	{envvar.Var{Name: "LETTAQ_LOG_FORMAT", Default: "auto", Help: "auto (colored text on a terminal, JSON otherwise), json or text"},
		func(c *RelaySettings, raw string) error {
			switch raw = strings.ToLower(raw); raw {
			case "auto", "json", "text":
				c.LogFormat = raw
				return nil
			}
			return errors.New("want auto, json or text")
		}},
	{envvar.Var{Name: "LETTAQ_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
		func(c *RelaySettings, raw string) error {
			if _, err := ParseLevel(raw); err != nil {
				return err
			}
			c.LogLevel = strings.ToLower(raw)
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_HTTP_ADDR", Default: DefaultRelayHTTPAddr, Help: `address of the HTTP listener (/healthz, /readyz, /metrics, /chat/); "off" disables it; any address but loopback requires LETTAQ_HTTP_TOKEN`},
		func(c *RelaySettings, raw string) error {
			if raw != "off" {
				if _, _, err := net.SplitHostPort(raw); err != nil {
					return errors.New(`want host:port (e.g. 127.0.0.1:8081) or "off"`)
				}
			}
			c.HTTPAddr = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_HTTP_TOKEN", Default: "", Secret: true, Help: "token for /metrics, /readyz?verbose and /chat/: Authorization: Bearer <token> or basic auth with the token as password; the chat page also takes it once as /chat/?token=<token> (then a session cookie); required off loopback"},
		func(c *RelaySettings, raw string) error { c.HTTPToken = raw; return nil }},
	{envvar.Var{Name: "LETTAQ_RELAY_FAKE_URL", Default: "", Help: "the fake platform's URL (relay/fakeplatform; tests and trials); it, LETTAQ_RELAY_WEB_AGENTS, LETTAQ_TELEGRAM_TOKEN or LETTAQ_SLACK_BOT_TOKEN is required"},
		func(c *RelaySettings, raw string) error { c.FakeURL = raw; return nil }},
	{envvar.Var{Name: "LETTAQ_RELAY_FAKE_INTEGRATION", Default: "fake", Help: "the integration whose chats go to the fake platform"},
		func(c *RelaySettings, raw string) error {
			if raw == "" || strings.ContainsAny(raw, ": \t") {
				return errors.New("must be non-empty, without ':' or spaces")
			}
			c.FakeIntegration = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_RELAY_FAKE_PART_LIMIT", Default: "4096", Help: "the fake platform's longest message, in UTF-16 code units"},
		func(c *RelaySettings, raw string) error { return relayInt(&c.FakePartLimit, raw, 1, 1<<20) }},
	{envvar.Var{Name: "LETTAQ_RELAY_WEB_AGENTS", Default: "", Help: "the web chat page at /chat/ (behind LETTAQ_HTTP_TOKEN): the agents it offers, comma-separated name=agent-<uuid> (or a bare agent id); * also lets a user type any agent id; unset: no page. Its turns get the task timeout of the budget variables below: set them as the workers'"},
		func(c *RelaySettings, raw string) error {
			c.WebAgents, c.WebAnyAgent = nil, false
			for _, item := range strings.Split(raw, ",") {
				item = strings.TrimSpace(item)
				if item == "" {
					continue
				}
				if item == "*" {
					c.WebAnyAgent = true
					continue
				}
				name, id, named := strings.Cut(item, "=")
				if !named {
					id = name
				}
				name, id = strings.TrimSpace(name), strings.TrimSpace(id)
				if !agentclient.IsAgentID(id) {
					return fmt.Errorf("%q: %q is not an agent id (agent-<uuid4>)", item, id)
				}
				c.WebAgents = append(c.WebAgents, webchat.Agent{Name: name, ID: id})
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_RELAY_WEB_JOURNAL_URL", Default: "", Help: "the web chat page links each turn to this address with the task id appended: a worker's /turns/ (e.g. https://worker.example/turns/); unset: no link"},
		func(c *RelaySettings, raw string) error {
			if raw != "" {
				u, err := url.Parse(raw)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "") {
					return errors.New("want an http(s) address or a path, e.g. https://worker.example/turns/")
				}
			}
			c.WebJournalURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_RELAY_KILL_AT", Default: "", Help: "testing only: <step>[#n] makes the process SIGKILL itself at the n-th (default 1st) time it reaches step (see relay.Steps)"},
		func(c *RelaySettings, raw string) error {
			if raw == "" {
				return nil
			}
			step, _, _ := strings.Cut(raw, "#")
			for _, s := range relay.Steps {
				if s == step {
					c.KillAt = raw
					return nil
				}
			}
			return fmt.Errorf("unknown step; want one of %s", strings.Join(relay.Steps, ", "))
		}},
}

func relayInt(p *int, raw string, lo, hi int) error {
	n, err := envvar.ParseInt(raw)
	if err != nil {
		return err
	}
	if n < lo || n > hi {
		return fmt.Errorf("must be between %d and %d", lo, hi)
	}
	*p = n
	return nil
}

func relayDur(p *time.Duration, raw string, lo time.Duration) error {
	d, err := envvar.ParseDuration(raw)
	if err != nil {
		return err
	}
	if d < lo {
		return fmt.Errorf("must be at least %v", lo)
	}
	*p = d
	return nil
}

// RelayVars lists every variable the relay reads, in --help's order.
func RelayVars() []envvar.Var {
	var vs []envvar.Var
	for _, s := range relaySettings {
		v := s.Var
		v.Flag = envvar.FlagName(v.Name)
		vs = append(vs, v)
	}
	return append(vs, budget.Vars()...)
}

// ParseRelaySettings reads the relay's configuration as ParseWorkerSettings
// reads the worker's: flag over variable over default; errors name both.
func ParseRelaySettings(args []string, getenv func(string) string, out io.Writer) (RelaySettings, error) {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vars := RelayVars()
	vals := map[string]*string{}
	for _, v := range vars {
		p := new(string)
		vals[v.Name] = p
		fs.Var(strFlag{p}, v.Flag, v.Help+" (env "+v.Name+")")
	}
	err := fs.Parse(args)
	l := lookup{getenv: getenv, flagged: map[string]string{}}
	fs.Visit(func(f *flag.Flag) {
		for _, v := range vars {
			if v.Flag == f.Name {
				l.flagged[v.Name] = *vals[v.Name]
			}
		}
	})
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			WriteUsage(out, "relay [flags]", "Carries the reply streams into the chats: typing, tool status, the growing answer by\nedits, approvals as buttons; replicas share the chats. Every flag overrides the\nenvironment variable named with it.", vars, nil)
			return RelaySettings{}, errHelp
		}
		return RelaySettings{}, &ConfigError{Errs: []error{err}}
	}
	if fs.NArg() > 0 {
		return RelaySettings{}, &ConfigError{Errs: []error{fmt.Errorf("unexpected argument %q (configuration is by flags and environment variables; see --help)", fs.Arg(0))}}
	}
	var c RelaySettings
	var errs []error
	for _, s := range relaySettings {
		raw, fromFlag := l.get(s.Name)
		if raw == "" {
			raw = s.Default
		}
		if s.Name == "LETTAQ_RELAY_ID" && raw == s.Default {
			host, _ := os.Hostname()
			raw = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		if err := s.apply(&c, raw); err != nil {
			errs = append(errs, varError(s.Var, raw, fromFlag, err))
		}
	}
	if ttl, err := replyStreamTTLOf(c.journalRetention, c.replyStreamTTL); err == nil {
		c.ReplyStreamTTL = ttl
	} // else: a bad value is in errs already
	getBudget := func(name string) string { raw, _ := l.get(name); return raw }
	b, err := budget.FromEnv(getBudget)
	if err != nil {
		errs = append(errs, annotateBudgetErr(err, l))
	}
	c.Budget = b
	errs = append(errs, checkSlack(c)...)
	if len(errs) == 0 {
		errs = append(errs, telegramCheck(c)...)
	}
	if len(errs) == 0 && c.FakeURL == "" && len(c.WebAgents) == 0 && !c.WebAnyAgent && c.Telegram.Token == "" && !c.Slack.enabled() {
		errs = append(errs, errors.New("none of LETTAQ_RELAY_FAKE_URL (flag --relay-fake-url), LETTAQ_RELAY_WEB_AGENTS (--relay-web-agents), LETTAQ_TELEGRAM_TOKEN (--telegram-token) and LETTAQ_SLACK_BOT_TOKEN (--slack-bot-token) is set: the relay needs something to deliver to (the fake platform, the web chat page, a Telegram bot, a Slack app)"))
	}
	if len(errs) == 0 && (len(c.WebAgents) > 0 || c.WebAnyAgent) && c.HTTPAddr == "off" {
		errs = append(errs, errors.New("LETTAQ_RELAY_WEB_AGENTS is set and LETTAQ_HTTP_ADDR is off: the web chat page is served by the HTTP listener"))
	}
	if len(errs) == 0 && c.HTTPAddr != "off" && c.HTTPToken == "" && !IsLoopback(c.HTTPAddr) {
		errs = append(errs, fmt.Errorf("LETTAQ_HTTP_TOKEN (--http-token) is required when LETTAQ_HTTP_ADDR (%s) is not a loopback address", c.HTTPAddr))
	}
	if len(errs) > 0 {
		return RelaySettings{}, &ConfigError{Errs: errs}
	}
	return c, nil
}

// RunRelay is cmd/relay: it exits 0 after SIGTERM/SIGINT, 1 on failure, 2 on
// bad configuration.
func RunRelay(ctx context.Context, args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	cfg, err := ParseRelaySettings(args, getenv, stdout)
	if errors.Is(err, errHelp) {
		return ExitOK
	}
	if err != nil {
		fmt.Fprintf(stderr, "relay: configuration error:\n%v\n", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	logger := NewLogger(stderr, cfg.LogFormat, cfg.LogLevel)
	SetRedisLogger(logger, slog.LevelWarn)
	if err := runRelay(ctx, cfg, logger); err != nil {
		logger.Error("relay stopped", "err", err)
		return ExitFailed
	}
	return ExitOK
}

func runRelay(ctx context.Context, cfg RelaySettings, logger *slog.Logger) error {
	opt, err := redis.ParseURL(cfg.RedisURL)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	connOpt, _ := RedisConnOpt(cfg.RedisURL, nil)
	layout, err := shard.New(cfg.QueueShards, "", cfg.KeyPrefix) // (the relay enqueues to the default queue)
	if err != nil {
		return err
	}
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: cfg.KeyPrefix, Shards: layout, StreamTTL: cfg.ReplyStreamTTL})
	// The workers' budget and ordering keys: an answer to an approval and a web chat message
	// are turns with their task timeout, in their chat's line.
	client, err := queue.NewClient(queue.ClientConfig{Redis: connOpt, Replies: replies, Budget: cfg.Budget, Shards: cfg.QueueShards,
		Ordering: queueOrdering("conversation", cfg.KeyPrefix)})
	if err != nil {
		return err
	}
	defer client.Close()
	reg := prometheus.NewRegistry()
	adapters := map[string]relay.Adapter{}
	if cfg.FakeURL != "" {
		adapters[cfg.FakeIntegration] = &fakeplatform.Client{URL: cfg.FakeURL, Limit: relay.Limits{PartLimit: cfg.FakePartLimit}}
	}
	if cfg.Slack.enabled() {
		if adapters[relayslack.Integration], err = newSlackAdapter(ctx, cfg.Slack, logger); err != nil {
			return err
		}
	}
	tg, err := newRelayTelegram(cfg, rdb, client, logger)
	if err != nil {
		return err
	}
	if tg != nil {
		adapters[telegram.Integration] = tg.adapter
	}
	r := relay.New(relay.Config{
		Redis: rdb, Prefix: cfg.KeyPrefix, Shards: layout, Control: client, AgentID: cfg.AgentID, EditEvery: cfg.EditEvery,
		Adapters: adapters,
		Step:     killAt(cfg.KillAt), Metrics: relay.NewMetrics(reg), Logger: logger,
	})
	// Ready only while Redis takes writes: a full Redis (noeviction) answers
	// PING but refuses the cursor and message-id writes the relay lives on.
	readyKey := cfg.KeyPrefix + "relay:ready:" + cfg.RelayID
	probe := newRedisProbe(rdb, func(ctx context.Context) error {
		return rdb.Set(ctx, readyKey, "1", 10*time.Second).Err()
	}, time.Second, time.Second, logger)
	defer probe.Close()
	if cfg.HTTPAddr != "off" {
		mux := http.NewServeMux()
		auth := requireToken(cfg.HTTPToken)
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
		mux.Handle("/readyz", readyzHandler(probe, r.Ready, auth))
		mux.Handle("/metrics", auth(promhttp.HandlerFor(reg, promhttp.HandlerOpts{})))
		if cfg.Slack.enabled() && cfg.Slack.SigningSecret != "" {
			mux.Handle(SlackPath, slackInbound(cfg.Slack, cfg.AgentID, client, r, logger))
		}
		if tg != nil && cfg.Telegram.Webhook {
			mux.Handle(TelegramWebhookPath, tg.webhook()) // its own secret, not the listener's token
		}
		var h http.Handler = mux
		if len(cfg.WebAgents) > 0 || cfg.WebAnyAgent {
			chat := newWebChat(webChatOptions{Redis: rdb, Prefix: cfg.KeyPrefix, Client: client, Replies: replies,
				Agents: cfg.WebAgents, AnyAgent: cfg.WebAnyAgent, JournalURL: cfg.WebJournalURL, Logger: logger})
			mux.Handle("/chat/", auth(http.StripPrefix("/chat", chat)))
			// A browser page: refuse other sites' pages, and, without a token, other hosts.
			h = refuseCrossOrigin(mux)
			if cfg.HTTPToken == "" {
				h = loopbackHostOnly(h)
			}
		}
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return err
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		logger.Info("relay listening", "addr", ln.Addr().String())
		if cfg.listening != nil {
			cfg.listening(ln.Addr().String())
		}
	}
	var wg sync.WaitGroup
	if tg != nil {
		wg.Add(1)
		go func() { defer wg.Done(); tg.run(ctx, r) }()
	}
	if cfg.Slack.AppToken != "" {
		wg.Add(1)
		go func() { defer wg.Done(); runSlackSocketMode(ctx, cfg.Slack, cfg.AgentID, client, r, logger) }()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			if err := r.Notify(ctx, cfg.Shards); err != nil && ctx.Err() == nil {
				logger.Warn("relay: notifications lost; listening again", "err", err)
				time.Sleep(time.Second)
				if n, err := r.Sweep(ctx, cfg.Shards); err == nil && n > 0 {
					logger.Info("relay: sweep marked chats", "chats", n)
				}
			}
		}
	}()
	if cfg.sweepEvery > 0 {
		wg.Add(1)
		go func() { defer wg.Done(); sweepEvery(ctx, r, cfg.Shards, cfg.sweepEvery, logger) }()
	}
	if n, err := r.Sweep(ctx, cfg.Shards); err != nil {
		logger.Warn("relay: start sweep failed", "err", err)
	} else {
		logger.Info("relay: start sweep done", "marked", n)
	}
	err = r.Run(ctx, relay.RunConfig{ID: cfg.RelayID, Shards: cfg.Shards, LeaseTTL: cfg.Lease, Workers: cfg.Workers})
	wg.Wait()
	return err
}

// sweepEvery marks the chats with news every d until ctx ends: where Redis
// sends no keyspace notifications (dev mode's in-memory Redis), the sweep is
// how the relay learns of them.
func sweepEvery(ctx context.Context, r *relay.Relay, shards int, d time.Duration, logger *slog.Logger) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if _, err := r.Sweep(ctx, shards); err != nil && ctx.Err() == nil {
				logger.Warn("relay: sweep failed", "err", err)
			}
		}
	}
}

// killAt returns the relay's step hook for LETTAQ_RELAY_KILL_AT: SIGKILL this
// process the n-th time the step is reached.
func killAt(spec string) func(string) {
	if spec == "" {
		return nil
	}
	step, nth, _ := strings.Cut(spec, "#")
	n, _ := strconv.Atoi(nth)
	n = max(n, 1)
	var mu sync.Mutex
	seen := 0
	return func(s string) {
		if s != step {
			return
		}
		mu.Lock()
		seen++
		hit := seen == n
		mu.Unlock()
		if hit {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {} // SIGKILL is not delivered synchronously
		}
	}
}
