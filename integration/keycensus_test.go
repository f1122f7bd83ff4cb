package integration

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// keyKind is one key pattern lettaq (or the ordering package, or Asynq
// for lettaq's queue) writes: how long it lives, and when it has no TTL,
// why. The table is docs/operations.md's "What Redis keeps and for how
// long" (TestKeyCensusDocumented keeps the two the same).
type keyKind struct {
	// Pattern is the key after its prefix: the key prefix's (P), the
	// ordering prefix's (O: P without braces, then "ord:") or Asynq's
	// queue's (A: "asynq:{<queue>}:"); <name> stands for any text.
	Pattern string
	Type    string
	// Kept says how long it lives (its TTL, and what refreshes it).
	Kept string
	// NoTTL: the key has no TTL by design; Kept says why, and what bounds it.
	NoTTL bool
}

// keyCatalog is every key pattern, in the order keys are matched (a more
// specific pattern before one that would also match its keys).
var keyCatalog = []keyKind{
	{"P replies:<integration>:<chat id>", "stream", "`LETTAQ_REPLY_STREAM_TTL` (default: `LETTAQ_JOURNAL_RETENTION`, 168h) after its last event; each write trims events older than that (`MINID ~`); at most ~10,000 events (`MAXLEN ~`)", false},
	{"P seq:<task>", "string", "7 days from the turn's first event (the replies' TTL)", false},
	{"P emitted:<task>", "hash", "7 days from the turn's first event", false},
	{"P answered:<task>", "string", "7 days from the turn's final event", false},
	{"P accepted:<task>", "string", "7 days from the turn's accepted event", false},
	{"P notified:<integration>:<chat id>:<key>", "string", "7 days from the notify", false},
	{"P journal:turn:<task>", "string", "`LETTAQ_JOURNAL_RETENTION` (168h) after the record's last save", false},
	{"P journal:intents:<task>", "list", "`LETTAQ_JOURNAL_RETENTION`, refreshed with the record", false},
	{"P journal:runners:<task>", "hash", "`LETTAQ_JOURNAL_RETENTION` from the last attempt's start", false},
	{"P journal:otid:<otid>", "string", "`LETTAQ_JOURNAL_RETENTION` from the save that wrote it", false},
	{"P journal:idx:<filter>", "zset", "`LETTAQ_JOURNAL_RETENTION` after its newest entry; at most 100,000 entries, those older than the retention trimmed as entries are added", false},
	{"P cancel:<task>", "string", "7 days from the cancel (the journal's default retention: a turn is not retried longer)", false},
	{"P approval:req:<task>", "string", "`LETTAQ_APPROVAL_TIMEOUT` + 7 days from the request (and from its answer)", false},
	{"P approval:otid:<otid>", "string", "as its request", false},
	{"P approval:pending:<agent>:<scope>", "string", "as its request; deleted when it is answered", false},
	{"P thread:<hash>:lock", "string", "the thread resolution's budget + 5 s; deleted when the thread is resolved", false},
	{"P thread:<hash>", "string", "no TTL: a chat's Letta conversation id; losing it would start the chat over in a new Letta conversation (its history at the agent gone). One small key (~100 B) per chat ever seen (thread mode `conversation`); delete a chat's by hand to start it over", true},
	{"P park:took:<task>", "string", "1 minute", false},
	{"P park:behind:<request>", "hash", "7 days (ParkTTL) from the last waiter", false},
	{"P park:idx", "zset", "7 days (ParkTTL) after the newest park; an entry leaves when its turn is taken", false},
	{"P park:<task>", "hash", "7 days (ParkTTL); deleted within milliseconds of the park, when the task is enqueued again", false},
	{"P ready:<worker>", "string", "10 s (the readiness probe's key)", false},
	{"P takeover:workers", "zset", "no TTL: one member per live worker process, rewritten every second; a worker leaves it when it stops, a dead one when another claims it. Global and small", true},
	{"P takeover:turns:<instance>", "hash", "no TTL: the turns one live worker runs (a field each, removed when the turn ends); deleted when the worker stops, moved to `claimed:` (1 minute) when another claims it dead", true},
	{"P takeover:dead:<instance>", "string", "1 hour", false},
	{"P takeover:claimed:<instance>", "hash", "1 minute", false},
	{"P takeover:beat:<instance>", "string", "1 minute", false},
	{"P takeover:lost:<instance>", "set", "1 hour", false},
	{"P takeover:taken:<task>", "string", "24 hours", false},
	{"P takeover:holder:<task>", "string", "24 hours; deleted when the turn ends", false},
	{"P takeover:number:<task>", "string", "24 hours; deleted when the turn ends", false},
	{"P relay:chat:<integration>:<chat id>", "hash", "7 days (the relay's StateTTL) after the relay's last write to it: its cursor, open turns and the platform's message ids", false},
	{"P relay:press:<button>", "string", "the approval's expiry + 24 hours (7 days without one): an approval button's request", false},
	{"P relay:shard:<shard>", "string", "`LETTAQ_RELAY_LEASE` (5s), renewed by the replica that holds the shard", false},
	{"P relay:dirty:<shard>", "zset", "no TTL: the chats of a shard with reply events not yet shown (an expiry would leave them unshown until the next sweep); a chat leaves when it is drained, the key goes with the last. At most one per shard (`LETTAQ_RELAY_SHARDS`, 64)", true},
	{"P relay:wake:<shard>", "list", "no TTL: at most one item, taken by the shard's holder's blocking read; one per shard (`LETTAQ_RELAY_SHARDS`, 64)", true},
	{"P relay:replicas", "zset", "no TTL: one member per live relay replica, beating every fifth of `LETTAQ_RELAY_LEASE`; a replica leaves it when it stops, a silent one is removed by the next beat. Global and small", true},
	{"P relay:ready:<replica>", "string", "10 s (relay mode's readiness probe's key)", false},
	{"P relay:telegram:offset:lease", "string", "the long poll's timeout + 15 s (40 s), renewed by the replica that polls; deleted when it stops", false},
	{"P relay:telegram:offset", "string", "no TTL: the next Telegram update the bot wants; without it Telegram sends again what it still holds (24 h) and the relay takes those once more. One small key per deployment", true},
	{"P webchat:said:<integration>:<chat id>", "hash", "7 days after the chat's last message: what the user said, for the web chat page", false},
	{"O line:{<conversation>}", "zset", "no TTL: the turns waiting in a conversation's line, in order (an expiry would reorder or lose them); the key goes when its last turn leaves, a dead head is removed by the next turn", true},
	{"O lock:{<conversation>}", "hash", "`LETTAQ_ORDERING_LEASE` (60s), renewed while its turn runs", false},
	{"O merged:{<conversation>}:<task>", "string", "24 hours (the ordering's MergedTTL)", false},
	{"O done:{<conversation>}:<task>", "string", "24 hours (the ordering's DoneTTL)", false},
	{"O group:{<conversation>}:<task>", "list", "24 hours (MergedTTL), as its `…:take` string", false},
	{"A t:<task>", "hash", "no TTL: Asynq's task. A queued one lives until it runs; a finished one until Asynq's janitor deletes it, `Retention` (24h) after it ended", true},
	{"A completed", "zset", "no TTL: Asynq's finished tasks by expiry; its janitor removes them `Retention` (24h) after they ended", true},
	{"A pending", "list", "no TTL: Asynq's queued tasks; empty (gone) when the queue is drained", true},
	{"A scheduled", "zset", "no TTL: Asynq's scheduled tasks (waiting turns' safety net, approval expiries)", true},
	{"A active", "list", "no TTL: Asynq's running tasks", true},
	{"A lease", "zset", "no TTL: Asynq's leases of running tasks", true},
	{"A retry", "zset", "no TTL: Asynq's tasks waiting for a retry", true},
	{"A archived", "zset", "no TTL: Asynq's failed tasks, capped by Asynq at 10,000 and 90 days", true},
	{"A processed", "string", "no TTL: Asynq's counter of the queue's processed tasks (one per queue)", true},
	{"A failed", "string", "no TTL: Asynq's counter of the queue's failed tasks (one per queue)", true},
	{"A processed:<date>", "string", "90 days (Asynq's daily statistics)", false},
	{"A failed:<date>", "string", "90 days (Asynq's daily statistics)", false},
}

// match returns the catalog entry for key (the part after its scope's
// prefix) in scope ("P", "O" or "A").
func match(scope, key string) (keyKind, bool) {
	for _, k := range keyCatalog {
		s, pat, _ := strings.Cut(k.Pattern, " ")
		if s != scope {
			continue
		}
		re := regexp.QuoteMeta(pat)
		re = regexp.MustCompile(`<[^>]*>`).ReplaceAllString(re, ".+")
		if regexp.MustCompile("^" + re + "$").MatchString(key) {
			return k, true
		}
	}
	return keyKind{}, false
}

// censusTable renders the catalog as docs/operations.md's table.
func censusTable() string {
	var b strings.Builder
	b.WriteString("| key | type | kept |\n| --- | --- | --- |\n")
	for _, k := range keyCatalog {
		scope, pat, _ := strings.Cut(k.Pattern, " ")
		prefix := map[string]string{"P": "<prefix>", "O": "<ordering prefix>", "A": "asynq:{<queue>}:"}[scope]
		kept := k.Kept
		if k.NoTTL {
			kept = "**" + strings.Replace(kept, ":", "**:", 1)
		}
		fmt.Fprintf(&b, "| `%s%s` | %s | %s |\n", prefix, pat, k.Type, kept)
	}
	return b.String()
}

// The table of docs/operations.md is the catalog's: an operator reads what
// the census checks. LETTAQ_PRINT_TABLE=1 prints it.
func TestKeyCensusDocumented(t *testing.T) {
	table := censusTable()
	if os.Getenv("LETTAQ_PRINT_TABLE") != "" {
		t.Log("\n" + table)
	}
	doc, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(doc), table) {
		t.Errorf("docs/operations.md lacks the key table of keyCatalog (LETTAQ_PRINT_TABLE=1 go test -run TestKeyCensusDocumented -v ./integration/ prints it)")
	}
}

// Every key a deployment's turns leave in Redis has a TTL, or is on the
// catalog's allow-list with its reason. Two workers run, in thread mode
// conversation with ordering and takeover on: a slow turn with two
// messages parked behind it (one cancelled), an approval request answered
// and another left open with a message parked behind it, a notify. The keys under the test's prefix (its
// own and the ordering's) and its Asynq queue's are read while the slow
// turn runs, once all settled, with the message parked, and after the
// workers stopped: each must
// match a catalog pattern, and one without a TTL must be allow-listed.
func TestKeyCensus(t *testing.T) {
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	stop1 := e.startWorker("w1")
	stop2 := e.startWorker("w2")
	ctx := context.Background()
	seen := map[string]bool{}
	census := func(when string) {
		t.Helper()
		n, bad := e.checkKeys(t, seen)
		for _, b := range bad {
			t.Errorf("%s: %s", when, b)
		}
		t.Logf("%s: %d keys", when, n)
	}

	slow := e.sim.CreateAgent("census-slow", slowScript(slowAnswer(40)))
	c1 := e.conv("c1")
	first := e.enqueue(queue.Message{AgentID: slow, Conversation: c1, MessageID: "m1", Text: "one"})
	second := e.enqueue(queue.Message{AgentID: slow, Conversation: c1, MessageID: "m2", Text: "two"})
	third := e.enqueue(queue.Message{AgentID: slow, Conversation: c1, MessageID: "m3", Text: "three"})
	e.waitEvent(c1, first.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta })
	if got := e.cancel(queue.CancelRequest{TaskID: second.TaskID, By: "census"}); got.Status != queue.CancelDone {
		t.Fatalf("cancel: %+v", got)
	}

	appr := e.sim.CreateAgent("census-appr", nil)
	c2 := e.conv("c2")
	req, _ := e.requestApproval(appr, c2, "a1", "delete_file")
	census("mid-turn")
	ans, err := e.client.Approve(ctx, req.Otid, "")
	if err != nil {
		t.Fatal(err)
	}
	if f, evs := e.waitFinal(c2, ans.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("after approval: %+v; %s", f, summarize(evs))
	}
	c3 := e.conv("c3")
	e.requestApproval(appr, c3, "a2", "delete_file") // left open

	if _, err := e.client.Notify(ctx, queue.Notice{Chat: e.conv("c4"), Text: "hello", Key: "census-1"}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []queue.EnqueueResult{first, third} {
		if f, evs := e.waitFinal(c1, r.TaskID, 30*time.Second); f.Type != record.EventAnswer {
			t.Fatalf("%s: %+v; %s", r.TaskID, f, summarize(evs))
		}
	}
	e.settled()
	census("settled")
	// A message to the chat whose request is open waits behind it, parked.
	e.enqueue(queue.Message{AgentID: appr, Conversation: c3, MessageID: "a3", Text: "and then?"})
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if keys, _ := e.rdb.Keys(ctx, e.prefix+"park:behind:*").Result(); len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message behind the open request did not park")
		}
	}
	census("parked")
	stop1()
	stop2()
	census("stopped")

	var kinds []string
	for k := range seen {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	t.Logf("patterns seen: %q", kinds)
	// The run reached what the census is for.
	for _, want := range []string{"P replies:<integration>:<chat id>", "P journal:idx:<filter>", "P approval:pending:<agent>:<scope>",
		"P cancel:<task>", "P notified:<integration>:<chat id>:<key>", "P thread:<hash>", "P takeover:holder:<task>",
		"P park:behind:<request>", "O line:{<conversation>}", "A t:<task>"} {
		if !seen[want] {
			t.Errorf("the run wrote no key of %s", want)
		}
	}
}

// checkKeys reads every key of the env's prefix and Asynq queue, notes the
// patterns seen, and returns the count of keys and what is wrong: a key
// that matches no catalog pattern, or has no TTL without being
// allow-listed.
func (e *env) checkKeys(t *testing.T, seen map[string]bool) (n int, bad []string) {
	t.Helper()
	ctx := context.Background()
	ordPrefix := queue.OrderingPrefix(e.prefix)
	scopes := []struct{ scope, prefix string }{{"O", ordPrefix}, {"P", e.prefix}, {"A", "asynq:{" + e.queue + "}:"}}
	for _, s := range scopes {
		iter := e.rdb.Scan(ctx, 0, s.prefix+"*", 500).Iterator()
		for iter.Next(ctx) {
			key := iter.Val()
			if s.scope == "P" && strings.HasPrefix(key, ordPrefix) {
				continue // the ordering's, read apart
			}
			n++
			k, ok := match(s.scope, strings.TrimPrefix(key, s.prefix))
			ttl, err := e.rdb.PTTL(ctx, key).Result()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case !ok:
				bad = append(bad, fmt.Sprintf("%s (TTL %v): no catalog pattern", key, ttl))
			case ttl == -1 && !k.NoTTL:
				bad = append(bad, fmt.Sprintf("%s: no TTL, and %q is not allow-listed", key, k.Pattern))
			}
			if ok {
				seen[k.Pattern] = true
				if os.Getenv("LETTAQ_TEST_CENSUS_TTLS") != "" {
					t.Logf("%s\t%v", k.Pattern, ttl)
				}
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
	}
	sort.Strings(bad)
	return n, bad
}

// The census fails on a key without a TTL that is not allow-listed, and on
// a key of no catalog pattern; not on an allow-listed one.
func TestKeyCensusCatchesAKeyWithoutTTL(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for key, ttl := range map[string]time.Duration{"seq:probe": 0, "unknown:probe": time.Minute, "thread:probe": 0, "answered:probe": time.Minute} {
		if err := e.rdb.Set(ctx, e.prefix+key, "1", ttl).Err(); err != nil {
			t.Fatal(err)
		}
	}
	n, bad := e.checkKeys(t, map[string]bool{})
	if n != 4 || len(bad) != 2 || !strings.Contains(bad[0], "seq:probe: no TTL") || !strings.Contains(bad[1], "unknown:probe (TTL ") {
		t.Errorf("%d keys, found wrong: %q", n, bad)
	}
}
