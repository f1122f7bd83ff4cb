// Package app holds what lettaq's commands share: configuration from environment variables and
// flags, logging, Redis connection options, the worker's HTTP listener (health, metrics,
// monitor), Prometheus metrics, and dev mode (an in-memory Redis and a Letta simulator).
//
// cmd/worker and cmd/enqueue are thin wrappers around RunWorker and RunEnqueue, so that the
// commands can be tested in-process.
package app

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/lettaq/lettaq/agentclient"
	"github.com/lettaq/lettaq/internal/hashtag"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/shard"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/envvar"
)

// Exit codes shared by the commands.
const (
	ExitOK       = 0 // success (enqueue: answered, or enqueued without --wait)
	ExitFailed   = 1 // the turn failed, or the worker stopped on an error
	ExitUsage    = 2 // bad input or configuration
	ExitTimedOut = 3 // enqueue --wait: no final event within --timeout
)

// WorkerSettings is the worker's whole configuration.
type WorkerSettings struct {
	RedisURL          string
	RedisClusterAddrs []string
	KeyPrefix         string
	LettaBaseURL      string
	LettaAPIKey       string
	StreamTransport   agentclient.StreamTransport
	Limits            Limits
	Budget            budget.Config
	Concurrency       int
	Queues            map[string]int
	Shards            int // LETTAQ_SHARDS: the chats' shards (queue/shard)
	StrictPriority    bool
	TaskCheckInterval time.Duration
	ShutdownTimeout   time.Duration
	HeartbeatInterval time.Duration
	MaxRetry          int
	Ordering          string        // conversation | agent | off
	OrderingLease     time.Duration // lease of a conversation's lock
	WaitCheck         time.Duration // safety net of a waiting turn (queue.Ordering.WaitCheck)
	JournalRetention  time.Duration // queue.JournalOptions.Retention
	ReplyStreamTTL    time.Duration // queue.RepliesOptions.StreamTTL (0: never)
	TakeoverAfter     time.Duration // a silent worker's turns are taken over after this; 0: off
	Coalesce          []string      // integrations whose waiting messages are merged
	ThreadMode        queue.ThreadMode
	ApprovalPolicy    queue.ApprovalPolicy
	ApprovalTimeout   time.Duration
	LogFormat         string // auto | json | text
	LogLevel          string // debug | info | warn | error
	HTTPAddr          string // "" or "off": no listener
	HTTPToken         string
	MonitorWritable   bool
	HTTPIdleTimeout   time.Duration // a keep-alive connection idle this long is closed
	HTTPBodyTimeout   time.Duration // a request body must arrive within this
	WorkerID          string
	Dev               bool
	DevRedisAddr      string
	DevLettaAddr      string
	Relay             string // dev mode: where the demo agents are talked to (devrelay.go)

	// replyStreamTTLFollows: LETTAQ_REPLY_STREAM_TTL is "journal", so
	// ReplyStreamTTL is JournalRetention (set once every setting is read).
	replyStreamTTLFollows bool
}

// setting binds one non-budget variable to a WorkerSettings field.
type setting struct {
	envvar.Var
	apply func(c *WorkerSettings, raw string) error
}

func stringSetting(p func(*WorkerSettings) *string) func(*WorkerSettings, string) error {
	return func(c *WorkerSettings, raw string) error { *p(c) = raw; return nil }
}

// replyStreamTTLJournal is LETTAQ_REPLY_STREAM_TTL's default: the reply
// streams keep their events as long as the journal keeps its records.
const replyStreamTTLJournal = "journal"

func durSetting(p func(*WorkerSettings) *time.Duration, min time.Duration) func(*WorkerSettings, string) error {
	return func(c *WorkerSettings, raw string) error {
		d, err := envvar.ParseDuration(raw)
		if err != nil {
			return err
		}
		if d < min {
			return fmt.Errorf("must be at least %v", min)
		}
		*p(c) = d
		return nil
	}
}

// Limits bound the bytes a worker takes from Letta and writes to one reply
// stream (LETTAQ_MAX_*_BYTES).
type Limits struct {
	Event, Response, Transcript, Reply int
}

// byteSetting reads a size: bytes, or a number with KiB, MiB or GiB.
func byteSetting(p func(*WorkerSettings) *int) func(*WorkerSettings, string) error {
	return func(c *WorkerSettings, raw string) error {
		n, err := ParseBytes(raw)
		if err != nil {
			return err
		}
		*p(c) = n
		return nil
	}
}

// ParseBytes reads a size: a number of bytes, or a number followed by KiB,
// MiB or GiB (e.g. 512KiB, 16MiB). It must be at least 1KiB.
func ParseBytes(raw string) (int, error) {
	s := strings.TrimSpace(raw)
	mult := 1
	for _, u := range []struct {
		suffix string
		mult   int
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSpace(strings.TrimSuffix(s, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0, errors.New("not a size (write e.g. 8388608, 512KiB, 16MiB, 1GiB)")
	}
	if n > (1<<40)/mult {
		return 0, errors.New("too large (at most 1024GiB)")
	}
	if n*mult < 1<<10 {
		return 0, errors.New("must be at least 1KiB")
	}
	return n * mult, nil
}

func intSetting(p func(*WorkerSettings) *int, min int) func(*WorkerSettings, string) error {
	return func(c *WorkerSettings, raw string) error {
		n, err := envvar.ParseInt(raw)
		if err != nil {
			return err
		}
		if n < min {
			return fmt.Errorf("must be at least %d", min)
		}
		*p(c) = n
		return nil
	}
}

func boolSetting(p func(*WorkerSettings) *bool) func(*WorkerSettings, string) error {
	return func(c *WorkerSettings, raw string) error {
		b, err := envvar.ParseBool(raw)
		if err != nil {
			return err
		}
		*p(c) = b
		return nil
	}
}

// Dev mode defaults.
const (
	DefaultDevRedisAddr = "127.0.0.1:6380"
	DefaultDevLettaAddr = "127.0.0.1:8283"
	DefaultHTTPAddr     = "127.0.0.1:8080"
	DefaultRedisURL     = "redis://127.0.0.1:6379/0"
	DefaultQueue        = "lettaq"
)

var workerSettings = []setting{
	{envvar.Var{Name: "REDIS_URL", Default: DefaultRedisURL,
		Help: "Redis for the queue, replies and journal: redis://[:password@]host:port/db, rediss:// (TLS), redis-socket://path, redis-sentinel://[:password@]h1:port,h2:port?master=name"},
		stringSetting(func(c *WorkerSettings) *string { return &c.RedisURL })},
	{envvar.Var{Name: "LETTAQ_REDIS_CLUSTER_ADDRS", Default: "",
		Help: "comma-separated host:port seeds of a Redis Cluster; when set, REDIS_URL's password and TLS apply to every node and its host and db are ignored; LETTAQ_KEY_PREFIX must then contain a hash tag such as {lettaq}:"},
		func(c *WorkerSettings, raw string) error {
			c.RedisClusterAddrs = nil
			for _, a := range strings.Split(raw, ",") {
				if a = strings.TrimSpace(a); a == "" {
					continue
				}
				if _, _, err := net.SplitHostPort(a); err != nil {
					return fmt.Errorf("%q is not host:port", redactURL(a))
				}
				c.RedisClusterAddrs = append(c.RedisClusterAddrs, a)
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_KEY_PREFIX", Default: "lettaq:",
		Help: `prefix of the reply stream and journal keys; with LETTAQ_REDIS_CLUSTER_ADDRS it must contain a hash tag such as "{lettaq}:" (checked at start: the keys of one turn must share a slot)`},
		func(c *WorkerSettings, raw string) error {
			if raw == "" {
				return errors.New("must not be empty")
			}
			c.KeyPrefix = raw
			return nil
		}},
	{envvar.Var{Name: "LETTA_BASE_URL", Default: "http://localhost:8283",
		Help: "the Letta server (self-hosted, or https://api.letta.com)"},
		func(c *WorkerSettings, raw string) error {
			if err := checkLettaBaseURL(raw); err != nil {
				return err
			}
			c.LettaBaseURL = raw
			return nil
		}},
	{envvar.Var{Name: "LETTA_API_KEY", Default: "", Secret: true,
		Help: "Letta API key, sent as a Bearer token; never logged"},
		stringSetting(func(c *WorkerSettings) *string { return &c.LettaAPIKey })},
	{envvar.Var{Name: "LETTA_STREAM_TRANSPORT", Default: string(agentclient.StreamDedicated),
		Help: `how agent streams reach Letta: "dedicated" (a connection per stream, read on the turn's own goroutine: ~20 KiB less per in-flight turn; falls back to net/http behind an HTTP proxy) or "net/http" (the shared pool, which negotiates HTTP/2 over TLS)`},
		func(c *WorkerSettings, raw string) error {
			st, err := agentclient.ParseStreamTransport(raw)
			if err != nil {
				return errors.New(strings.TrimPrefix(err.Error(), "stream transport "))
			}
			c.StreamTransport = st
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_MAX_EVENT_BYTES", Default: "16MiB",
		Help: "the largest SSE event (its data lines joined) accepted from Letta; a larger one fails the turn with a permanent error naming the limit (one SSE line may be 8MiB at most, or this if smaller)"},
		byteSetting(func(c *WorkerSettings) *int { return &c.Limits.Event })},
	{envvar.Var{Name: "LETTAQ_MAX_RESPONSE_BYTES", Default: "8MiB",
		Help: "the largest body of a non-streaming Letta answer (a run, a page of messages); a larger one fails the turn with a permanent error naming the limit"},
		byteSetting(func(c *WorkerSettings) *int { return &c.Limits.Response })},
	{envvar.Var{Name: "LETTAQ_MAX_TRANSCRIPT_BYTES", Default: "8MiB",
		Help: "the most text one turn accumulates from Letta (reasoning, tool calls and returns, the answer); past it the turn fails with a permanent error naming the limit"},
		byteSetting(func(c *WorkerSettings) *int { return &c.Limits.Transcript })},
	{envvar.Var{Name: "LETTAQ_MAX_REPLY_BYTES", Default: "4MiB",
		Help: "the most progress text (answer deltas, tool arguments and returns) one attempt of a turn writes to its reply stream; past it progress text is dropped, with a warning, and the final answer event still carries the whole answer"},
		byteSetting(func(c *WorkerSettings) *int { return &c.Limits.Reply })},
	{envvar.Var{Name: "LETTAQ_CONCURRENCY", Default: "200",
		Help: "turns one worker runs at once; turns wait on the network, not the CPU, so this is far above the CPU count"},
		intSetting(func(c *WorkerSettings) *int { return &c.Concurrency }, 1)},
	{envvar.Var{Name: "LETTAQ_QUEUES", Default: DefaultQueue + "=1",
		Help: `queues to take turns from, with priorities: "name=weight,name=weight" (a bare name has weight 1)`},
		func(c *WorkerSettings, raw string) error {
			q, err := ParseQueues(raw)
			if err != nil {
				return err
			}
			c.Queues = q
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_SHARDS", Default: "1",
		Help: "spread the chats over this many shards, each an Asynq queue and key prefix of its own named after LETTAQ_QUEUES' one queue (16 on a 3-master Redis Cluster; see docs/operations.md); the same on every worker and producer: a worker refuses to start under another layout than the deployment's recorded one"},
		intSetting(func(c *WorkerSettings) *int { return &c.Shards }, 1)},
	{envvar.Var{Name: "LETTAQ_STRICT_PRIORITY", Default: "false", Bool: true,
		Help: "drain higher-weight queues first instead of sharing by weight"},
		boolSetting(func(c *WorkerSettings) *bool { return &c.StrictPriority })},
	{envvar.Var{Name: "LETTAQ_TASK_CHECK_INTERVAL", Default: "100ms",
		Help: "how often an idle worker asks Redis for new turns, which bounds the pickup latency of a message that arrives at an idle worker (about half of it on average); shorter costs more Redis commands per idle worker (10ms: ~100/s per worker)"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.TaskCheckInterval }, 10*time.Millisecond)},
	{envvar.Var{Name: "LETTAQ_SHUTDOWN_TIMEOUT", Default: "60s",
		Help: "on SIGTERM/SIGINT, how long running turns may take to finish; turns still running then are cancelled and requeued (never sent twice: the next attempt continues the run)"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.ShutdownTimeout }, time.Second)},
	{envvar.Var{Name: "LETTAQ_HEARTBEAT_INTERVAL", Default: "4s",
		Help: "how often a running turn repeats its phase event, so typing indicators stay alive"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.HeartbeatInterval }, 100*time.Millisecond)},
	{envvar.Var{Name: "LETTAQ_ORDERING", Default: "conversation",
		Help: "one turn at a time, in arrival order, per conversation (agent + integration + chat), per agent (\"agent\": for an agent shared by many chats), or \"off\"; enqueue must use the same"},
		func(c *WorkerSettings, raw string) error {
			switch raw = strings.ToLower(strings.TrimSpace(raw)); raw {
			case "conversation", "agent", "off":
				c.Ordering = raw
				return nil
			}
			return errors.New("want conversation, agent or off")
		}},
	{envvar.Var{Name: "LETTAQ_ORDERING_LEASE", Default: "60s",
		Help: "lease of a conversation's lock, renewed every third of it while its turn runs; a turn whose worker cannot reach Redis this long stops (a killed worker's turn keeps its place and runs again when another worker takes it over, see LETTAQ_TAKEOVER_AFTER, or Asynq recovers it)"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.OrderingLease }, 100*time.Millisecond)},
	{envvar.Var{Name: "LETTAQ_WAIT_CHECK", Default: "10m",
		Help: "safety net of a message that waits (behind the turn ahead of it in its conversation, or behind its chat's open approval request): the event that frees it wakes it within a second; should that wake-up be lost, it looks again this long after it began to wait. It waits as an Asynq scheduled task this far ahead, never in Retry"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.WaitCheck }, time.Second)},
	{envvar.Var{Name: "LETTAQ_JOURNAL_RETENTION", Default: "168h",
		Help: "how long a turn's journal record (its attempts, intents and the journal's indexes) is kept after its last write, and by default the reply streams' events (LETTAQ_REPLY_STREAM_TTL); what bounds a Redis that keeps every finished turn (see docs/operations.md, Redis memory)"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.JournalRetention }, time.Minute)},
	{envvar.Var{Name: "LETTAQ_REPLY_STREAM_TTL", Default: replyStreamTTLJournal,
		Help: `how long a conversation's reply stream keeps its events: each write trims the events older than this (XTRIM MINID ~), and the stream expires this long after its last event (a consumer that reads later finds nothing); "journal" (the default): LETTAQ_JOURNAL_RETENTION's; 0: never, each stream is only capped at 10,000 events (the default before streams were bounded)`},
		func(c *WorkerSettings, raw string) error {
			if raw == replyStreamTTLJournal {
				c.replyStreamTTLFollows = true
				return nil
			}
			c.replyStreamTTLFollows = false
			return durSetting(func(c *WorkerSettings) *time.Duration { return &c.ReplyStreamTTL }, 0)(c, raw)
		}},
	{envvar.Var{Name: "LETTAQ_TAKEOVER_AFTER", Default: "5s",
		Help: "a worker whose beats (every second) stop this long is taken for dead and its running turns are continued by another worker, under the same otid and journal record, without sending twice; 0 turns it off (a killed worker's turns then wait for Asynq's recovery, 1 to 3 minutes)"},
		func(c *WorkerSettings, raw string) error {
			d, err := envvar.ParseDuration(raw)
			if err != nil {
				return err
			}
			if d != 0 && d < 2*time.Second {
				return errors.New("must be 0 (off) or at least 2s")
			}
			c.TakeoverAfter = d
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_COALESCE", Default: "",
		Help: "comma-separated integrations (e.g. telegram,slack) whose messages that arrive while their conversation is busy are sent together as the next turn's one user message; needs LETTAQ_ORDERING=conversation"},
		func(c *WorkerSettings, raw string) error {
			c.Coalesce = nil
			for _, n := range strings.Split(raw, ",") {
				if n = strings.TrimSpace(n); n != "" {
					c.Coalesce = append(c.Coalesce, n)
				}
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_THREAD_MODE", Default: string(queue.ThreadConversation),
		Help: `which Letta thread a chat talks to: "conversation" (each chat, i.e. agent + integration + chat id, gets a Letta conversation of its own, created on first use and kept in Redis; chats of one agent run in parallel, locked and deduplicated by Letta), "default" (all chats share the agent's default thread through the conversation endpoints: one run at a time; use LETTAQ_ORDERING=agent) or "agent" (the deprecated agent endpoints, no server lock or deduplication: the journal gate alone guards against duplicates)`},
		func(c *WorkerSettings, raw string) error {
			if err := c.ThreadMode.UnmarshalText([]byte(raw)); err != nil {
				return errors.New("want conversation, default or agent")
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_APPROVAL_POLICY", Default: string(queue.ApprovalWait),
		Help: `what a chat message does while the agent waits for the answer to an approval request of that chat: "wait" (it waits in its line until the request is answered or expires), "deny" (lettaq denies the pending tool calls, telling the agent the user moved on, then sends the message) or "error" (the message fails with an error event)`},
		func(c *WorkerSettings, raw string) error {
			if err := c.ApprovalPolicy.UnmarshalText([]byte(raw)); err != nil {
				return errors.New("want wait, deny or error")
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_APPROVAL_TIMEOUT", Default: "24h",
		Help: "an approval request nobody answers is denied automatically this long after it was made, with a reason the agent is told, so that no chat stays blocked"},
		func(c *WorkerSettings, raw string) error {
			if err := durSetting(func(c *WorkerSettings) *time.Duration { return &c.ApprovalTimeout }, time.Second)(c, raw); err != nil {
				return err
			}
			if c.ApprovalTimeout > queue.MaxApprovalTimeout {
				return fmt.Errorf("must be at most %v (366 days)", queue.MaxApprovalTimeout)
			}
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_MAX_RETRY", Default: "25",
		Help: "retries of a failed attempt for turns this worker enqueues through /enqueue (enqueue's --max-retry for the CLI); the task's Asynq max retry is one more, kept for put-backs (a turn that waits for its chat is put back through a retry, never counted as a failure; GET /budget answers the value to set)"},
		intSetting(func(c *WorkerSettings) *int { return &c.MaxRetry }, 0)},
	{envvar.Var{Name: "LETTAQ_LOG_FORMAT", Default: "auto",
		Help: "auto (colored text on a terminal, JSON otherwise), json or text"},
		func(c *WorkerSettings, raw string) error {
			switch raw = strings.ToLower(raw); raw {
			case "auto", "json", "text":
				c.LogFormat = raw
				return nil
			}
			return errors.New("want auto, json or text")
		}},
	{envvar.Var{Name: "LETTAQ_LOG_LEVEL", Default: "info", Help: "debug, info, warn or error"},
		func(c *WorkerSettings, raw string) error {
			if _, err := ParseLevel(raw); err != nil {
				return err
			}
			c.LogLevel = strings.ToLower(raw)
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_HTTP_ADDR", Default: DefaultHTTPAddr,
		Help: `address of the HTTP listener (/healthz, /readyz, /metrics, /monitor/, /enqueue, /cancel, /notify); "off" disables it; any address but loopback requires LETTAQ_HTTP_TOKEN`},
		func(c *WorkerSettings, raw string) error {
			if raw != "off" {
				if _, _, err := net.SplitHostPort(raw); err != nil {
					return errors.New(`want host:port (e.g. 127.0.0.1:8080, 0.0.0.0:8080) or "off"`)
				}
			}
			c.HTTPAddr = raw
			return nil
		}},
	{envvar.Var{Name: "LETTAQ_HTTP_TOKEN", Default: "", Secret: true,
		Help: "token for /metrics, /monitor/, /enqueue, /cancel and /notify: Authorization: Bearer <token> or basic auth with the token as password; the monitor also takes it once as /monitor/?token=<token> (then a session cookie); required off loopback"},
		stringSetting(func(c *WorkerSettings) *string { return &c.HTTPToken })},
	{envvar.Var{Name: "LETTAQ_MONITOR_WRITABLE", Default: "false", Bool: true,
		Help: "let the monitor (asynqmon at /monitor/) delete, run and archive tasks; read-only by default"},
		boolSetting(func(c *WorkerSettings) *bool { return &c.MonitorWritable })},
	{envvar.Var{Name: "LETTAQ_HTTP_IDLE_TIMEOUT", Default: "60s",
		Help: "the HTTP listener closes a keep-alive connection that has waited this long for its next request"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.HTTPIdleTimeout }, time.Millisecond)},
	{envvar.Var{Name: "LETTAQ_HTTP_BODY_TIMEOUT", Default: "30s",
		Help: "the HTTP listener drops a request whose body has not fully arrived this long after its headers (which must arrive within 10s); answers may take longer"},
		durSetting(func(c *WorkerSettings) *time.Duration { return &c.HTTPBodyTimeout }, time.Millisecond)},
	{envvar.Var{Name: "LETTAQ_WORKER_ID", Default: "<hostname>-<pid>",
		Help: "this worker's name in the journal and logs"},
		stringSetting(func(c *WorkerSettings) *string { return &c.WorkerID })},
	{envvar.Var{Name: "LETTAQ_DEV", Default: "false", Bool: true,
		Help: "dev mode: an in-memory Redis and a Letta simulator in this process, short clocks so recovery shows in seconds; nothing else to install"},
		boolSetting(func(c *WorkerSettings) *bool { return &c.Dev })},
	{envvar.Var{Name: "LETTAQ_DEV_REDIS_ADDR", Default: DefaultDevRedisAddr,
		Help: "dev mode: where the in-memory Redis listens (enqueue --dev connects here)"},
		stringSetting(func(c *WorkerSettings) *string { return &c.DevRedisAddr })},
	{envvar.Var{Name: "LETTAQ_DEV_LETTA_ADDR", Default: DefaultDevLettaAddr,
		Help: "dev mode: where the Letta simulator listens (another free port if taken)"},
		stringSetting(func(c *WorkerSettings) *string { return &c.DevLettaAddr })},
	{envvar.Var{Name: "LETTAQ_RELAY", Default: "web", Help: devRelayHelp},
		func(c *WorkerSettings, raw string) error {
			var err error
			c.Relay, err = parseDevRelay(raw)
			return err
		}},
}

// WorkerVars lists every environment variable the worker reads, budget included, in the order
// --help shows them.
func WorkerVars() []envvar.Var {
	var vs []envvar.Var
	for _, s := range workerSettings {
		v := s.Var
		v.Flag = envvar.FlagName(v.Name)
		vs = append(vs, v)
	}
	vs = append(vs, budget.Vars()...)
	return vs
}

// DevBudgetDefaults are the budget values dev mode uses for variables not set explicitly: short
// clocks against a simulator that pings every second, so a long-thinking turn outlives the
// stream clock and shows the continuation within seconds.
var DevBudgetDefaults = map[string]string{
	"LETTAQ_CONNECT_TIMEOUT":     "5s",
	"LETTAQ_STALL_TIMEOUT":       "4s",
	"LETTAQ_CONTENT_IDLE_NOTICE": "2s",
	"LETTAQ_STREAM_TOTAL":        "8s",
	"LETTAQ_ADMISSION_GRACE":     "5s",
	"LETTAQ_CONTINUATION_MAX":    "2m",
	"LETTAQ_POLL_INITIAL":        "500ms",
	"LETTAQ_POLL_MAX":            "2s",
	"LETTAQ_REQUEST_TIMEOUT":     "5s",
	"LETTAQ_BACKGROUND":          "true",
	"LETTAQ_DELIVERY_ALLOWANCE":  "5s",
	"LETTAQ_SAFETY_MARGIN":       "5s",
}

// DevBudget returns the budget dev mode uses when nothing is set.
func DevBudget() budget.Config {
	c, err := budget.FromEnv(func(k string) string { return DevBudgetDefaults[k] })
	if err != nil {
		panic(err)
	}
	return c
}

// boolFlag is a string flag that may be given without a value (--dev).
type boolFlag struct{ p *string }

func (b boolFlag) String() string {
	if b.p == nil {
		return ""
	}
	return *b.p
}
func (b boolFlag) Set(s string) error { *b.p = s; return nil }
func (b boolFlag) IsBoolFlag() bool   { return true }

type strFlag struct{ p *string }

func (s strFlag) String() string {
	if s.p == nil {
		return ""
	}
	return *s.p
}
func (s strFlag) Set(v string) error { *s.p = v; return nil }

// ConfigError is a configuration problem; every message names the variable (and flag).
type ConfigError struct{ Errs []error }

func (e *ConfigError) Error() string {
	var b strings.Builder
	for i, err := range e.Errs {
		if i > 0 {
			b.WriteString("\n")
		}
		b.WriteString(err.Error())
	}
	return b.String()
}

// errHelp is returned by ParseWorkerSettings when --help was asked for (usage was printed).
var errHelp = flag.ErrHelp

// lookup reads one variable: the flag's value when the flag was given, else the environment.
type lookup struct {
	getenv  func(string) string
	flagged map[string]string // env name → flag value
}

func (l lookup) get(name string) (raw string, fromFlag bool) {
	if v, ok := l.flagged[name]; ok {
		return strings.TrimSpace(v), true
	}
	return strings.TrimSpace(l.getenv(name)), false
}

// ParseWorkerSettings reads the worker's configuration: each flag overrides its variable, which
// overrides the default. Errors name the variable (and flag). --help prints usage to out and
// returns flag.ErrHelp.
func ParseWorkerSettings(args []string, getenv func(string) string, out io.Writer) (WorkerSettings, error) {
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vars := WorkerVars()
	vals := make(map[string]*string, len(vars))
	for _, v := range vars {
		p := new(string)
		vals[v.Name] = p
		usage := v.Help + " (env " + v.Name + ")"
		if v.Bool {
			fs.Var(boolFlag{p}, v.Flag, usage)
		} else {
			fs.Var(strFlag{p}, v.Flag, usage)
		}
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
			WriteUsage(out, "worker [flags]\n       worker healthcheck [--timeout D]    (GET this worker's /readyz: exit 0 ready, 1 not; see worker healthcheck --help)\n       worker check-config [flags]         (check the configuration and exit: 0 the worker would start, 2 not, with why)", "Runs lettaq turns: takes messages from Redis (Asynq), streams them to Letta agents,\nwrites reply events. Every flag overrides the environment variable named with it.", vars, helpTaskTimeout(l))
			return WorkerSettings{}, errHelp
		}
		return WorkerSettings{}, &ConfigError{Errs: []error{err}}
	}
	if fs.NArg() > 0 {
		return WorkerSettings{}, &ConfigError{Errs: []error{fmt.Errorf("unexpected argument %q (configuration is by flags and environment variables; see --help)", fs.Arg(0))}}
	}
	return buildWorkerSettings(l)
}

// helpTaskTimeout is --help's statement of the task timeout for the configuration given so far
// (environment and the flags before --help), which producers in other languages must use.
func helpTaskTimeout(l lookup) []string {
	dev := false
	if raw, _ := l.get("LETTAQ_DEV"); raw != "" {
		dev, _ = envvar.ParseBool(raw)
	}
	b, err := budget.FromEnv(func(name string) string {
		raw, _ := l.get(name)
		if raw == "" && dev {
			raw = DevBudgetDefaults[name]
		}
		return raw
	})
	if err != nil {
		return []string{"", "Task timeout: not computable, the budget is invalid:", err.Error()}
	}
	mode := "with this configuration"
	if dev {
		mode = "in dev mode with this configuration"
	}
	return []string{"",
		fmt.Sprintf("Task timeout %s: %ds (%s), computed from the time budget below:", mode, int64(b.TaskTimeout()/time.Second), b.TaskTimeout()),
		"  " + BudgetFormula(b),
		"Producers in other languages give their Asynq tasks this timeout; a running worker answers",
		"it (and the other task options) at GET /budget."}
}

func buildWorkerSettings(l lookup) (WorkerSettings, error) {
	var c WorkerSettings
	var errs []error
	for _, s := range workerSettings {
		raw, fromFlag := l.get(s.Name)
		if raw == "" {
			raw = s.Default
		}
		if s.Name == "LETTAQ_WORKER_ID" && raw == s.Default {
			host, _ := os.Hostname()
			if host == "" {
				host = "worker"
			}
			raw = fmt.Sprintf("%s-%d", host, os.Getpid())
		}
		if err := s.apply(&c, raw); err != nil {
			errs = append(errs, varError(s.Var, raw, fromFlag, err))
		}
	}
	if c.replyStreamTTLFollows {
		c.ReplyStreamTTL = c.JournalRetention
	}
	// Budget: flags first, then environment, then (in dev mode) dev defaults, then defaults.
	getBudget := func(name string) string {
		raw, _ := l.get(name)
		if raw == "" && c.Dev {
			raw = DevBudgetDefaults[name]
		}
		return raw
	}
	b, err := budget.FromEnv(getBudget)
	if err != nil {
		errs = append(errs, annotateBudgetErr(err, l))
	}
	c.Budget = b
	if len(errs) == 0 {
		if err := c.check(); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return WorkerSettings{}, &ConfigError{Errs: errs}
	}
	return c, nil
}

// check applies the rules that span several variables.
func (c *WorkerSettings) check() error {
	if c.HTTPAddr != "off" && c.HTTPToken == "" && !IsLoopback(c.HTTPAddr) {
		return fmt.Errorf("LETTAQ_HTTP_TOKEN (--http-token) is required when LETTAQ_HTTP_ADDR (%s) is not a loopback address: the monitor and metrics must not be open to the network; "+
			"make one with openssl rand -hex 16 (with docker compose: in .env next to docker-compose.yaml, see .env.example)", c.HTTPAddr)
	}
	if !c.Dev && c.Relay != "web" {
		return fmt.Errorf("LETTAQ_RELAY (--relay) is %s without LETTAQ_DEV (--dev): the worker runs a relay only in dev mode, against a fake platform; "+
			"the production bot is the relay command (cmd/relay) with the platform's token (docs/relay.md)", c.Relay)
	}
	if c.Shards > shard.MaxShards {
		return fmt.Errorf("LETTAQ_SHARDS (--shards) is %d, more than %d: each shard is a queue every idle worker polls", c.Shards, shard.MaxShards)
	}
	if c.Shards > 1 && len(c.Queues) != 1 {
		return fmt.Errorf("LETTAQ_SHARDS (--shards) is %d with %d queues in LETTAQ_QUEUES: with shards give one queue, the base name of the shards' queues", c.Shards, len(c.Queues))
	}
	if !c.Dev {
		if _, err := c.RedisConnOpt(); err != nil {
			return err
		}
		if err := checkClusterKeyPrefix(c.KeyPrefix, c.RedisClusterAddrs); err != nil {
			return err
		}
	}
	return nil
}

// checkClusterKeyPrefix refuses a key prefix without a hash tag on Redis Cluster (clusterAddrs
// set): lettaq's reply, journal and intent scripts and the journal's MULTI each touch several
// keys under the prefix, which Redis Cluster runs only when they share a slot (CROSSSLOT
// otherwise, on every turn).
func checkClusterKeyPrefix(prefix string, clusterAddrs []string) error {
	if len(clusterAddrs) == 0 || hashtag.Of(prefix) != "" {
		return nil
	}
	return fmt.Errorf("LETTAQ_KEY_PREFIX=%q (flag --key-prefix) has no hash tag, but LETTAQ_REDIS_CLUSTER_ADDRS is set: "+
		"on Redis Cluster every turn's reply and journal writes touch several keys at once and would fail with CROSSSLOT; "+
		"use a prefix with a non-empty hash tag, such as \"{lettaq}:\" (the same on every worker, enqueue and reader)", prefix)
}

func varError(v envvar.Var, raw string, fromFlag bool, err error) error {
	v.Flag = envvar.FlagName(v.Name)
	shown := strconv.Quote(redactURL(raw)) // a URL's password, or anything else before an '@'
	if v.Secret {
		shown = "(secret)"
	}
	if fromFlag {
		return fmt.Errorf("--%s (%s) = %s: %v", v.Flag, v.Name, shown, err)
	}
	return fmt.Errorf("%s=%s: %v (flag --%s)", v.Name, shown, err, v.Flag)
}

// annotateBudgetErr keeps budget's messages (they name the variables) and says which values
// came from flags.
func annotateBudgetErr(err error, l lookup) error {
	msg := err.Error()
	var flags []string
	for name := range l.flagged {
		if strings.Contains(msg, name) {
			flags = append(flags, "--"+envvar.FlagName(name)+" sets "+name)
		}
	}
	if len(flags) == 0 {
		return err
	}
	sort.Strings(flags)
	return fmt.Errorf("%w\n(%s)", err, strings.Join(flags, "; "))
}

// ParseQueues parses "name=weight,name" into Asynq's queue map.
func ParseQueues(raw string) (map[string]int, error) {
	q := map[string]int{}
	for _, part := range strings.Split(raw, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, w, hasW := strings.Cut(part, "=")
		name = strings.TrimSpace(name)
		weight := 1
		if hasW {
			n, err := strconv.Atoi(strings.TrimSpace(w))
			if err != nil || n < 1 {
				return nil, fmt.Errorf("queue %q: weight %q must be an integer >= 1", name, w)
			}
			weight = n
		}
		if name == "" || strings.ContainsAny(name, " \t:") {
			return nil, fmt.Errorf("queue name %q must be non-empty, without spaces or ':'", name)
		}
		q[name] = weight
	}
	if len(q) == 0 {
		return nil, errors.New("at least one queue is needed")
	}
	return q, nil
}

// RedisConnOpt returns Asynq's connection options for the configuration (not in dev mode).
func (c *WorkerSettings) RedisConnOpt() (asynq.RedisConnOpt, error) {
	return RedisConnOpt(c.RedisURL, c.RedisClusterAddrs)
}

// RedisConnOpt turns REDIS_URL (and optional cluster seeds) into Asynq's connection options.
func RedisConnOpt(redisURL string, clusterAddrs []string) (asynq.RedisConnOpt, error) {
	if err := checkURLUserinfo(redisURL); err != nil {
		return nil, fmt.Errorf("REDIS_URL=%q: %v", redactURL(redisURL), err)
	}
	opt, err := asynq.ParseRedisURI(redisURL)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL=%q: %s", redactURL(redisURL), strings.TrimPrefix(urlParseError(err, redisURL), "asynq: "))
	}
	if o, ok := opt.(asynq.RedisClientOpt); ok && o.Network != "unix" {
		if err := checkHostPort(o.Addr); err != nil {
			return nil, fmt.Errorf("REDIS_URL=%q: %v", redactURL(redisURL), err)
		}
	}
	if len(clusterAddrs) == 0 {
		return opt, nil
	}
	for _, a := range clusterAddrs {
		if err := checkHostPort(a); err != nil {
			return nil, fmt.Errorf("LETTAQ_REDIS_CLUSTER_ADDRS (--redis-cluster-addrs): %q: %v", redactURL(a), err)
		}
	}
	co := asynq.RedisClusterClientOpt{Addrs: clusterAddrs}
	if o, ok := opt.(asynq.RedisClientOpt); ok {
		co.Username, co.Password, co.TLSConfig = o.Username, o.Password, o.TLSConfig
	}
	return co, nil
}

// checkHostPort checks a host:port whose port is a number from 1 to 65535: a port out of range
// is a configuration error, not a Redis that does not answer.
func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q is not host:port", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q is not a number from 1 to 65535", port)
	}
	return nil
}

// IsLoopback reports whether a listen address only accepts local connections.
func IsLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// WriteUsage prints a command's usage: synopsis, description, extra lines, then every variable
// with its flag and default (secrets show as set/unset).
func WriteUsage(w io.Writer, synopsis, desc string, vars []envvar.Var, extra []string) {
	fmt.Fprintf(w, "Usage: %s\n\n%s\n", synopsis, desc)
	for _, e := range extra {
		fmt.Fprintln(w, e)
	}
	fmt.Fprintf(w, "\nFlags and environment variables:\n")
	budgetHeader := false
	hasDev := false // dev mode's budget is told only where there is a dev mode
	for _, v := range vars {
		hasDev = hasDev || v.Name == "LETTAQ_DEV"
	}
	for _, v := range vars {
		if v.Budget && !budgetHeader {
			budgetHeader = true
			fmt.Fprintf(w, "\nTime budget of a turn (the task timeout is computed from these):\n")
		}
		def := v.Default
		if v.Secret {
			def = "unset"
		} else if def == "" {
			def = `""`
		}
		fmt.Fprintf(w, "  --%s  (env %s, default %s)\n", v.Flag, v.Name, def)
		if dev, ok := DevBudgetDefaults[v.Name]; ok && v.Budget && hasDev {
			fmt.Fprintf(w, "        %s [dev mode: %s]\n", v.Help, dev)
		} else {
			fmt.Fprintf(w, "        %s\n", v.Help)
		}
	}
}

// VarsTable renders vars as a Markdown table (variable, flag, default, meaning) for docs/configuration.md.
func VarsTable(vars []envvar.Var) string {
	var b strings.Builder
	b.WriteString("| variable | flag | default | meaning |\n|---|---|---|---|\n")
	for _, v := range vars {
		def := "`" + v.Default + "`"
		if v.Default == "" {
			def = "(unset)"
		}
		fmt.Fprintf(&b, "| `%s` | `--%s` | %s | %s |\n", v.Name, v.Flag, def, strings.ReplaceAll(v.Help, "|", "\\|"))
	}
	return b.String()
}
