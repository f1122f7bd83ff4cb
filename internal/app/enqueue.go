package app

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/envvar"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// ExitApproval is enqueue --wait's exit code when the agent asks for a tool approval.
const ExitApproval = 4

// EnqueueVars lists the environment variables enqueue reads (besides the budget's, which it
// reads so that the task timeout matches the workers').
var EnqueueVars = []envvar.Var{
	{Name: "REDIS_URL", Flag: "redis-url", Default: DefaultRedisURL, Help: "Redis of the queue (as the worker's REDIS_URL)"},
	{Name: "LETTAQ_REDIS_CLUSTER_ADDRS", Flag: "redis-cluster-addrs", Default: "", Help: "Redis Cluster seeds (as the worker's)"},
	{Name: "LETTAQ_KEY_PREFIX", Flag: "key-prefix", Default: "lettaq:", Help: "prefix of the reply stream and journal keys (as the worker's; on Redis Cluster it must contain a hash tag such as {lettaq}:)"},
	{Name: "LETTAQ_QUEUE", Flag: "queue", Default: DefaultQueue, Help: "queue to put the turn on (with shards: the base name of the shards' queues)"},
	{Name: "LETTAQ_SHARDS", Flag: "shards", Default: "1", Help: "the chats' shards (as the worker's): the turn goes to its chat's shard's queue"},
	{Name: "LETTAQ_AGENT_ID", Flag: "agent", Default: "", Help: "the Letta agent that answers: its id, or its name (looked up at Letta; dev mode: " + DemoAgent + ")"},
	{Name: "LETTA_BASE_URL", Flag: "letta-base-url", Default: "http://localhost:8283", Help: "the Letta server, asked only to resolve an agent name (as the worker's)"},
	{Name: "LETTA_API_KEY", Flag: "letta-api-key", Default: "", Secret: true, Help: "Letta API key, for resolving an agent name (as the worker's)"},
	{Name: "LETTAQ_DEV_REDIS_ADDR", Flag: "dev-redis-addr", Default: DefaultDevRedisAddr, Help: "with --dev: the dev worker's in-memory Redis"},
	{Name: "LETTAQ_ORDERING", Flag: "ordering", Default: "conversation", Help: "conversation, agent or off (as the worker's): the turn joins its line"},
	{Name: "LETTAQ_MAX_RETRY", Flag: "max-retry", Default: "25", Help: "retries after the first attempt"},
	{Name: "LETTAQ_WAIT_CHECK", Flag: "wait-check", Default: "10m", Help: "a message behind its chat's running turn waits as a task scheduled this far ahead, the safety net: the turn ahead wakes it as it ends (as the worker's)"},
	{Name: "LETTAQ_JOURNAL_RETENTION", Flag: "journal-retention", Default: "168h", Help: "as the worker's: by default, how long the reply streams keep the events enqueue writes (accepted, notify, cancel)"},
	{Name: "LETTAQ_REPLY_STREAM_TTL", Flag: "reply-stream-ttl", Default: replyStreamTTLJournal, Help: "as the worker's: how long a reply stream keeps the events enqueue writes, and lives after its last one (\"journal\": LETTAQ_JOURNAL_RETENTION's; 0: never)"},
}

type enqueueOpts struct {
	redisURL, clusterAddrs, prefix, queueName, agent, devRedis string
	lettaURL, lettaKey                                         string
	ordering                                                   string
	integration, chat, messageID, sender, otid                 string
	reason, key                                                string
	images                                                     []queue.Image
	dev, jsonOut, wait, all                                    bool
	timeout                                                    time.Duration
	maxRetry, limit, shards                                    int
	waitCheck                                                  time.Duration
	// journalRetention and replyStreamTTL as given; streamTTL, the reply
	// streams' TTL they make (replyStreamTTLOf).
	journalRetention, replyStreamTTL string
	streamTTL                        time.Duration
}

const enqueueSynopsis = `enqueue [flags] TEXT            (or the text on stdin)
       enqueue [flags] journal [recent|stalls|retries|resends|failures] [--limit N]
       enqueue [flags] journal show <task-id|otid|the beginning of one>
       enqueue [flags] approve|deny <task-id|otid> [--reason TEXT]
       enqueue [flags] cancel <task-id|otid>
       enqueue [flags] cancel --chat [INTEGRATION:]CHAT_ID --agent AGENT [--all]
       enqueue [flags] notify --chat [INTEGRATION:]CHAT_ID [--key KEY] TEXT   (or the text on stdin)`

const enqueueDesc = `Puts one chat message on the lettaq queue as an agent turn; with --wait, follows the
conversation's reply events until the turn's answer (or error) arrives. "journal" shows what
the workers recorded about recent turns (a table on a terminal, JSON otherwise or with --json).
"approve"/"deny" answer every pending tool call of the approval request of the turn named by
its task id or otid (printed by --wait, and in the approval_required event): a turn of its
own, ahead of the chat's waiting messages; with --wait it is followed like a message.
"cancel" stops a turn named by its task id or otid (or the beginning of one, as journal show
takes it; a turn that never started by its whole task id), or with --chat the chat's running
turn (--all: also its waiting ones): a waiting turn is removed and never sent; a running one
is stopped at Letta, and its final event (error, stop_reason cancelled) carries what the agent
had said. A turn already answered is left as it is (exit 1).
"notify" writes TEXT into the chat of its own accord (a scheduled job, a tool on the agent's
side): one event of type notify in the chat's reply stream, which the relay shows as a message
of its own. --key names the message (1 to 128 of A-Z a-z 0-9 - . _ ~): the same key again in
the same chat (within 7 days) writes nothing new, so a retry is safe; without --key one is
minted and printed. At most 16384 bytes of text.

Exit codes (of the built command: go run exits 1 for any failure):
  0  answered (or, without --wait, enqueued; a duplicate message id also exits 0; the same
     message id with another text is refused, exit 2)
  1  the turn failed (a permanent error event), or it could not be enqueued (Redis trouble);
     cancel: the turn was already answered
  2  bad input or configuration, checked before anything connects, or a Redis that refuses
     REDIS_URL's credentials (cancel: no turn has that id; notify: the key was used in the chat
     for another text)
  3  --wait timed out before the turn ended
  4  the agent asks for approval of a tool call (approval_required)
  5  no Redis at the address (dev mode: no worker --dev running; else check REDIS_URL)`

// RunEnqueue is the enqueue command. It returns the exit code.
func RunEnqueue(ctx context.Context, args []string, getenv func(string) string, stdin io.Reader, stdout, stderr io.Writer) int {
	stderr = termWriter{stderr} // everything on stderr is for a person: no control characters
	fs := flag.NewFlagSet("enqueue", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var o enqueueOpts
	envOr := func(name, def string) string {
		if v := strings.TrimSpace(getenv(name)); v != "" {
			return v
		}
		return def
	}
	fs.StringVar(&o.redisURL, "redis-url", envOr("REDIS_URL", DefaultRedisURL), "")
	fs.StringVar(&o.clusterAddrs, "redis-cluster-addrs", envOr("LETTAQ_REDIS_CLUSTER_ADDRS", ""), "")
	fs.StringVar(&o.prefix, "key-prefix", envOr("LETTAQ_KEY_PREFIX", "lettaq:"), "")
	fs.StringVar(&o.queueName, "queue", envOr("LETTAQ_QUEUE", DefaultQueue), "")
	fs.StringVar(&o.agent, "agent", envOr("LETTAQ_AGENT_ID", ""), "")
	fs.StringVar(&o.lettaURL, "letta-base-url", envOr("LETTA_BASE_URL", "http://localhost:8283"), "")
	fs.StringVar(&o.lettaKey, "letta-api-key", envOr("LETTA_API_KEY", ""), "")
	fs.StringVar(&o.devRedis, "dev-redis-addr", envOr("LETTAQ_DEV_REDIS_ADDR", DefaultDevRedisAddr), "")
	fs.StringVar(&o.integration, "integration", "cli", "")
	fs.StringVar(&o.chat, "chat", "", "")
	fs.StringVar(&o.messageID, "message-id", "", "")
	fs.StringVar(&o.sender, "sender", "", "")
	fs.StringVar(&o.otid, "otid", "", "")
	fs.StringVar(&o.reason, "reason", "", "")
	fs.StringVar(&o.key, "key", "", "")
	fs.Var(imagesValue{&o.images}, "image", "")
	fs.BoolVar(&o.dev, "dev", false, "")
	fs.BoolVar(&o.jsonOut, "json", false, "")
	fs.BoolVar(&o.wait, "wait", false, "")
	fs.BoolVar(&o.all, "all", false, "")
	o.timeout = 10 * time.Minute
	fs.Var(positiveDurationValue{&o.timeout}, "timeout", "")
	fs.StringVar(&o.ordering, "ordering", envOr("LETTAQ_ORDERING", "conversation"), "")
	if err := (countValue{&o.maxRetry}).Set(envOr("LETTAQ_MAX_RETRY", strconv.Itoa(queue.DefaultMaxRetry))); err != nil {
		fmt.Fprintf(stderr, "enqueue: LETTAQ_MAX_RETRY=%q: %v\n", getenv("LETTAQ_MAX_RETRY"), err)
		return ExitUsage
	}
	fs.Var(countValue{&o.maxRetry}, "max-retry", "")
	if err := (countValue{&o.shards}).Set(envOr("LETTAQ_SHARDS", "1")); err != nil {
		fmt.Fprintf(stderr, "enqueue: LETTAQ_SHARDS=%q: %v\n", getenv("LETTAQ_SHARDS"), err)
		return ExitUsage
	}
	fs.Var(countValue{&o.shards}, "shards", "")
	if err := (durationValue{&o.waitCheck}).Set(envOr("LETTAQ_WAIT_CHECK", "10m")); err != nil {
		fmt.Fprintf(stderr, "enqueue: LETTAQ_WAIT_CHECK=%q: %v\n", getenv("LETTAQ_WAIT_CHECK"), err)
		return ExitUsage
	}
	fs.Var(durationValue{&o.waitCheck}, "wait-check", "")
	fs.StringVar(&o.journalRetention, "journal-retention", envOr("LETTAQ_JOURNAL_RETENTION", ""), "")
	fs.StringVar(&o.replyStreamTTL, "reply-stream-ttl", envOr("LETTAQ_REPLY_STREAM_TTL", ""), "")
	o.limit = 20
	fs.Var(intValue{&o.limit}, "limit", "")
	usage := func() {
		WriteUsage(stdout, enqueueSynopsis, enqueueDesc, EnqueueVars, nil)
		fmt.Fprint(stdout, `  --integration NAME   the chat integration, part of the conversation (default cli)
  --chat ID            the chat id, part of the conversation (default: the sender, else "local");
                       cancel and notify take INTEGRATION:CHAT_ID (or CHAT_ID with --integration)
  --message-id ID      the integration's message id: a message enqueued twice makes one turn
  --sender ID          passed to Letta as sender_id
  --otid UUID          the turn's idempotency key at Letta (default: derived from the task id)
  --image URL|@FILE    an image sent with the text (repeatable): an http(s) URL, or a local
                       .png/.jpg/.gif/.webp file sent as base64
  --reason TEXT        approve|deny: the reason told to the agent; cancel: kept in the journal
  --all                cancel --chat: the chat's waiting turns too, not only its running one
  --key KEY            notify: the message's idempotency key (default: minted and printed); the
                       same key again in the chat writes nothing new
  --dev                reach a worker started with --dev (its in-memory Redis, agent `+DemoAgent+`)
  --wait               follow the turn until its answer: a live status line (time in the step, the
                       turn's total) and the answer as it grows on a terminal; plain lines on stderr
                       and the answer on stdout otherwise
  --timeout D          give up waiting after D, more than 0 (exit 3; the turn goes on) (default 10m)
  --json               machine output: the enqueue result, then (with --wait) one reply event per line
  --limit N            journal: how many turns (default 20)
Time budget: the task timeout is computed from the LETTAQ_* budget variables, as in the worker
(see worker --help); set them alike.
`)
	}
	// Flags may come before and after the positional arguments.
	var pos []string
	rest := args
	for {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return ExitOK
			}
			fmt.Fprintf(stderr, "enqueue: %v (see --help)\n", flagError(err))
			return ExitUsage
		}
		rest = fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		rest = rest[1:]
	}
	warnUnknownVars(NewLogger(stderr, strings.ToLower(getenv("LETTAQ_LOG_FORMAT")), "info"), getenv)

	// Every setting is checked before anything connects: a bad one exits 2 whether or not a
	// Redis answers.
	connOpt, err := o.connOpt()
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitUsage
	}
	if err := o.checkOrdering(); err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitUsage
	}
	if o.streamTTL, err = replyStreamTTLOf(o.journalRetention, o.replyStreamTTL); err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitUsage
	}
	if !o.dev {
		if err := checkLettaBaseURL(o.lettaURL); err != nil {
			fmt.Fprintf(stderr, "enqueue: LETTA_BASE_URL=%q (flag --letta-base-url): %v\n", redactURL(o.lettaURL), err)
			return ExitUsage
		}
	}
	if co, ok := connOpt.(asynq.RedisClusterClientOpt); ok {
		if err := checkClusterKeyPrefix(o.prefix, co.Addrs); err != nil {
			fmt.Fprintf(stderr, "enqueue: configuration error:\n%v\n", err)
			return ExitUsage
		}
	}
	b, err := enqueueBudget(o.dev, getenv)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: configuration error:\n%v\n", err)
		return ExitUsage
	}
	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	rdb, ok := connOpt.MakeRedisClient().(redis.UniversalClient)
	if !ok {
		fmt.Fprintf(stderr, "enqueue: unsupported Redis connection %T\n", connOpt)
		return ExitUsage
	}
	defer rdb.Close()
	SetRedisLogger(NewLogger(stderr, "auto", "warn"), slog.LevelDebug) // go-redis's own lines: hidden

	if len(pos) > 0 && pos[0] == "journal" {
		if code := checkEnqueueRedis(ctx, rdb, &o, connOpt, stderr); code != ExitOK {
			return code
		}
		return runJournal(ctx, o, pos[1:], rdb, connOpt, stdout, stderr)
	}

	if len(pos) > 0 && pos[0] == "cancel" {
		if code := checkEnqueueRedis(ctx, rdb, &o, connOpt, stderr); code != ExitOK {
			return code
		}
		return o.cancel(ctx, pos[1:], connOpt, b, rdb, stdout, stderr)
	}

	if len(pos) > 0 && pos[0] == "notify" {
		n, minted, err := o.notice(pos[1:], stdin)
		if err != nil {
			fmt.Fprintf(stderr, "enqueue: notify: %v\n", err)
			return ExitUsage
		}
		if code := checkEnqueueRedis(ctx, rdb, &o, connOpt, stderr); code != ExitOK {
			return code
		}
		return o.notify(ctx, n, minted, connOpt, b, rdb, stdout, stderr)
	}

	answerVerb := ""
	if len(pos) > 0 && (pos[0] == "approve" || pos[0] == "deny") {
		answerVerb, pos = pos[0], pos[1:]
	}
	var text string
	switch {
	case answerVerb != "":
	case len(pos) > 0:
		text = strings.Join(pos, " ")
	case stdin != nil && !IsTerminalReader(stdin):
		t, err := readStdinText(stdin)
		if err != nil {
			fmt.Fprintf(stderr, "enqueue: %v\n", err)
			return ExitUsage
		}
		text = t
	}
	if answerVerb != "" {
		return o.answer(ctx, answerVerb, pos, connOpt, b, rdb, stdout, stderr)
	}
	if strings.TrimSpace(text) == "" && len(o.images) == 0 {
		fmt.Fprintf(stderr, "enqueue: no message text: give it as an argument or on stdin (see --help)\n")
		return ExitUsage
	}
	if o.agent == "" && o.dev {
		o.agent = DemoAgent
	}
	if o.agent == "" {
		fmt.Fprintf(stderr, "enqueue: --agent (or LETTAQ_AGENT_ID) is required\n")
		return ExitUsage
	}
	if code := checkEnqueueRedis(ctx, rdb, &o, connOpt, stderr); code != ExitOK {
		return code
	}
	id, badName, err := resolveAgentArg(ctx, o, rdb)
	if err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		if badName {
			return ExitUsage
		}
		return ExitFailed
	}
	o.agent = id
	if o.chat == "" {
		o.chat = o.sender
		if o.chat == "" {
			o.chat = "local"
		}
	}
	conv := record.Conversation{Integration: o.integration, ChatID: o.chat}
	msg := queue.Message{AgentID: o.agent, Text: text, SenderID: o.sender, Conversation: conv,
		MessageID: o.messageID, Otid: o.otid, Images: o.images}
	if err := msg.Validate(); err != nil {
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitUsage
	}
	client, replies, code := o.newClient(connOpt, b, rdb, stderr)
	if client == nil {
		return code
	}
	defer client.Close()

	// Where the reply stream stands before the enqueue, so that --wait misses nothing.
	after := "$"
	if o.wait {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, after, err = replies.Read(rctx, conv, "$", 1, 0)
		cancel()
		if err != nil {
			fmt.Fprintf(stderr, "enqueue: cannot read the reply stream: %v\n", err)
			return ExitFailed
		}
	}
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	res, err := client.Enqueue(ectx, msg)
	cancel()
	if err != nil {
		var conflict *queue.MessageIDConflictError
		var layout *shard.MismatchError
		if _, ok := queue.IsValidationError(err); ok || errors.As(err, &conflict) || errors.As(err, &layout) {
			fmt.Fprintf(stderr, "enqueue: %v\n", err)
			return ExitUsage
		}
		fmt.Fprintf(stderr, "enqueue: %v\n", err)
		return ExitFailed
	}
	if o.jsonOut {
		_ = writeJSON(stdout, res, false)
	} else {
		// Always, also before a live view on a terminal: the ids are what journal show takes.
		dup := ""
		if res.Duplicate {
			dup = " (duplicate: this message id was enqueued before; no second turn)"
		}
		fmt.Fprint(stderrIfWait(o.wait, stdout, stderr), termSafe(fmt.Sprintf("enqueued task %s otid %s on queue %s%s\n",
			res.TaskID, res.Otid, res.Queue, dup), true))
	}
	if !o.wait {
		return ExitOK
	}
	if res.Duplicate {
		after = "0" // its events may be older than our starting point
	}
	return follow(ctx, replies, conv, res, after, o, stdout, stderr)
}

// maxStdinCount bounds how far enqueue reads a text on stdin that is over queue.MaxTextBytes,
// to tell its real size (counted, not kept).
const maxStdinCount = 64 << 20

// readStdinText reads the message text from stdin, without its trailing line breaks. A text
// over queue.MaxTextBytes is refused with its real size (up to maxStdinCount; "more than" past
// it), read to the end but not held.
func readStdinText(stdin io.Reader) (string, error) {
	const room = queue.MaxTextBytes + 2 // the text and a trailing "\r\n", trimmed below
	data, err := io.ReadAll(io.LimitReader(stdin, room))
	if err != nil {
		return "", fmt.Errorf("reading stdin: %v", err)
	}
	if len(data) == room {
		rest, err := io.Copy(io.Discard, io.LimitReader(stdin, maxStdinCount-room+1))
		if err != nil {
			return "", fmt.Errorf("reading stdin: %v", err)
		}
		switch total := room + rest; {
		case total > maxStdinCount:
			return "", fmt.Errorf("the text on stdin is more than %d bytes, more than the limit of %d", maxStdinCount, queue.MaxTextBytes)
		case rest > 0:
			return "", fmt.Errorf("the text on stdin is %d bytes, more than the limit of %d", total, queue.MaxTextBytes)
		}
	}
	return strings.TrimRight(string(data), "\r\n"), nil
}

func stderrIfWait(wait bool, stdout, stderr io.Writer) io.Writer {
	if wait {
		return stderr
	}
	return stdout
}

// IsTerminalReader reports whether r is a terminal (so there is no piped text to read).
func IsTerminalReader(r io.Reader) bool {
	f, ok := r.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func (o *enqueueOpts) connOpt() (asynq.RedisConnOpt, error) {
	if o.dev {
		return asynq.RedisClientOpt{Addr: o.devRedis}, nil
	}
	var seeds []string
	for _, a := range strings.Split(o.clusterAddrs, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if _, _, err := net.SplitHostPort(a); err != nil {
				return nil, fmt.Errorf("LETTAQ_REDIS_CLUSTER_ADDRS (--redis-cluster-addrs): %q is not host:port", redactURL(a))
			}
			seeds = append(seeds, a)
		}
	}
	return RedisConnOpt(o.redisURL, seeds)
}

func enqueueBudget(dev bool, getenv func(string) string) (budget.Config, error) {
	return budget.FromEnv(func(k string) string {
		if v := strings.TrimSpace(getenv(k)); v != "" {
			return v
		}
		if dev {
			return DevBudgetDefaults[k]
		}
		return ""
	})
}

// devRedisTries is how many reads in a row enqueue --dev --wait lets fail before it gives up:
// a dev Redis that stops answering is a dev worker that stopped, and its queue went with it. A
// real Redis is waited for until --timeout (it comes back; the turn is still in it).
const devRedisTries = 3

// follow reads the conversation's reply events for res's turn until its final event.
func follow(ctx context.Context, replies *queue.Replies, conv record.Conversation, res queue.EnqueueResult, after string, o enqueueOpts, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	tty := !o.jsonOut && IsTerminal(stdout)
	v := newViewer(tty, o.jsonOut, stdout, stderr, nil)
	v.hint = o.hint
	defer v.clearStatus()
	var lastSeq int64
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	failures := 0 // reads failed in a row
	for {
		evs, last, err := replies.Read(ctx, conv, after, 100, 250*time.Millisecond)
		if ctx.Err() != nil {
			v.clearStatus()
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				fmt.Fprintf(stderr, "enqueue: no answer within %v; the turn goes on (task %s). Its record:\n  %s\n",
					o.timeout, res.TaskID, o.hint("journal", "show", res.TaskID))
				return ExitTimedOut
			}
			return ExitFailed
		}
		if err != nil {
			v.clearStatus()
			failures++
			if o.dev && failures >= devRedisTries {
				fmt.Fprintf(stderr, "enqueue: the dev worker's Redis at %s stopped answering (%d tries): dev mode keeps its queue in memory, in the worker's process, so this turn ended with it (was `worker --dev` stopped?): %v\n",
					o.devRedis, failures, err)
				return ExitNoRedis
			}
			fmt.Fprintf(stderr, "enqueue: reading replies: %v\n", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		failures = 0
		after = last
		for _, ev := range evs {
			if ev.TaskID != res.TaskID || ev.Seq <= lastSeq {
				continue
			}
			lastSeq = ev.Seq
			if code, done := v.show(ev); done {
				return code
			}
		}
		v.redraw()
	}
}
