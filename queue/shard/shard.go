package shard

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"

	"github.com/lettaq/lettaq/internal/hashtag"
)

// Scheme is the version of how chats map to shards and shards are named
// (see the package doc); it is part of the recorded layout.
const Scheme = 1

// MaxShards bounds N: more shards than this cost an idle worker far more
// Redis commands than they spread (each shard is a queue it polls).
const MaxShards = 256

// DefaultQueue and DefaultPrefix are the base queue and key prefix when
// none is configured.
const (
	DefaultQueue  = "lettaq"
	DefaultPrefix = "lettaq:"
)

// Layout is one deployment's shards: make it with New. The zero value is
// not usable.
type Layout struct {
	n      int
	queue  string
	prefix string
	names  []string // the shards' queues, by index
	index  map[string]int
}

// New returns the layout of n shards over the base queue and key prefix
// ("" takes DefaultQueue, DefaultPrefix). n = 1 is the single layout: the
// queue and prefix as given.
func New(n int, queue, prefix string) (Layout, error) {
	if queue == "" {
		queue = DefaultQueue
	}
	if prefix == "" {
		prefix = DefaultPrefix
	}
	switch {
	case n < 1:
		return Layout{}, fmt.Errorf("shards: %d is not a number of shards (at least 1)", n)
	case n > MaxShards:
		return Layout{}, fmt.Errorf("shards: %d is more than %d", n, MaxShards)
	case n > 1 && strings.ContainsAny(queue, "{}:"):
		return Layout{}, fmt.Errorf("shards: queue %q: with more than one shard the queue name may not hold '{', '}' or ':' (it becomes a hash tag)", queue)
	}
	l := Layout{n: n, queue: queue, prefix: prefix, names: make([]string, n), index: make(map[string]int, n)}
	for i := range n {
		l.names[i] = queue
		if n > 1 {
			l.names[i] = Name(queue, i, n)
		}
		l.index[l.names[i]] = i
	}
	return l, nil
}

// N is the number of shards.
func (l Layout) N() int { return l.n }

// BaseQueue and BasePrefix are the configured queue and key prefix.
func (l Layout) BaseQueue() string  { return l.queue }
func (l Layout) BasePrefix() string { return l.prefix }

// Of returns the shard of the chat (integration, chat id) among n: the
// first 4 bytes of SHA-256(integration + ":" + chatID), read as a
// big-endian unsigned 32-bit number, mod n. (SHA-256 spreads sequential
// chat ids evenly, which CRC16 mod n does not: 1,000 ids "chat-0" … fell
// 44 to 94 on each of 16 shards; every language has it.)
func Of(n int, integration, chatID string) int {
	if n <= 1 {
		return 0
	}
	sum := sha256.Sum256([]byte(integration + ":" + chatID))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(n))
}

// Of returns the shard of the chat (integration, chat id) in l.
func (l Layout) Of(integration, chatID string) int { return Of(l.n, integration, chatID) }

// Queue returns shard i's Asynq queue.
func (l Layout) Queue(i int) string { return l.names[i] }

// Queues returns every shard's queue, by index (a copy).
func (l Layout) Queues() []string { return append([]string(nil), l.names...) }

// Index returns the shard whose queue is q.
func (l Layout) Index(q string) (int, bool) {
	i, ok := l.index[q]
	return i, ok
}

// Prefix returns shard i's key prefix: the base prefix with N = 1, else
// the base prefix without its braces, then "{<queue of i>}:".
func (l Layout) Prefix(i int) string {
	if l.n == 1 {
		return l.prefix
	}
	return unbraced(l.prefix) + "{" + l.names[i] + "}:"
}

// unbraced is prefix without '{' and '}': a hash tag in the base prefix
// would come first and put every shard in its slot.
func unbraced(prefix string) string { return strings.NewReplacer("{", "", "}", "").Replace(prefix) }

// TaskID returns the id of a task of shard i whose single-layout id is id
// ("<kind>:<rest>"): id itself with N = 1, else "<kind>:{<queue of
// i>}:<rest>" ("turn:telegram:42:m1" in shard 3 of 16 over "lettaq":
// "turn:{lettaq-3-…}:telegram:42:m1").
func (l Layout) TaskID(i int, id string) string {
	if l.n == 1 {
		return id
	}
	kind, rest, ok := strings.Cut(id, ":")
	if !ok {
		return "{" + l.names[i] + "}:" + id
	}
	return kind + ":{" + l.names[i] + "}:" + rest
}

// OfTask returns the shard of a task from its id: 0 with N = 1, else the
// shard whose queue is the id's hash tag (false: the id names none of l's
// shards).
func (l Layout) OfTask(id string) (int, bool) {
	if l.n == 1 {
		return 0, true
	}
	return l.Index(hashtag.Of(id))
}

// Name returns the queue of shard i of n over the base queue: the first
// "<queue>-<i>-<k>", k = 0, 1, 2, …, whose slot (hashtag.Slot) lies within
// 16384/(8n) of (2i+1)·16384/(2n), in integers (Window).
func Name(queue string, i, n int) string {
	lo, hi := Window(i, n)
	base := queue + "-" + strconv.Itoa(i) + "-"
	for k := 0; ; k++ {
		name := base + strconv.Itoa(k)
		if s := int(hashtag.CRC16(name) % hashtag.Slots); s >= lo && s <= hi {
			return name
		}
	}
}

// Window returns the slots, lo to hi inclusive, that shard i of n is named
// into: c ± w with c = (2i+1)·16384/(2n) and w = 16384/(8n) (integer
// division).
func Window(i, n int) (lo, hi int) {
	c := (2*i + 1) * hashtag.Slots / (2 * n)
	w := hashtag.Slots / (8 * n)
	return c - w, c + w
}

// Record is the layout as recorded in Redis: the scheme, N, the base queue
// and the base prefix.
func (l Layout) Record() string {
	return "scheme=" + strconv.Itoa(Scheme) + " shards=" + strconv.Itoa(l.n) + " queue=" + l.queue + " prefix=" + l.prefix
}
