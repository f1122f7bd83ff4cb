package integration

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/hashtag"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// globalPatterns are the catalog's patterns whose keys stay under the base
// prefix with N shards: the deployment's, not a chat's.
var globalPatterns = map[string]bool{
	"P ready:<worker>": true, "P park:idx": true,
}

// TestKeySlotsSharded: with 4 shards on one Redis, every key of a chat's turns (its reply
// stream, notify marker, markers, journal record, intents, runners, otid key, cancel record,
// approval request, park keys) lies in one slot, its shard's queue's; a key under a shard's
// prefix belongs to that shard; what stays under the base prefix is the takeover registry,
// the readiness keys, the park index and the pending approvals of shared threads. Every key
// also matches the catalog, with a TTL or a documented reason.
func TestKeySlotsSharded(t *testing.T) {
	e := newEnv(t, withShards(4), withThreadMode(queue.ThreadConversation))
	e.startWorker("w1")
	e.startWorker("w2")
	ctx := context.Background()
	layout := e.layout()

	// Per chat, the names that its keys carry: its chat id, its turns' task ids and otids.
	names := map[record.Conversation][]string{}
	note := func(c record.Conversation, rs ...queue.EnqueueResult) {
		names[c] = append(names[c], c.ChatID)
		for _, r := range rs {
			names[c] = append(names[c], r.TaskID, r.Otid)
		}
	}
	slow := e.sim.CreateAgent("slots-slow", slowScript(slowAnswer(30)))
	c1 := e.conv("c1")
	first := e.enqueue(queue.Message{AgentID: slow, Conversation: c1, MessageID: "m1", Text: "one"})
	second := e.enqueue(queue.Message{AgentID: slow, Conversation: c1, MessageID: "m2", Text: "two"})
	e.waitEvent(c1, first.TaskID, func(ev record.ReplyEvent) bool { return ev.Type == record.EventAnswerDelta })
	if got := e.cancel(queue.CancelRequest{TaskID: second.TaskID, By: "slots"}); got.Status != queue.CancelDone {
		t.Fatalf("cancel: %+v", got)
	}
	note(c1, first, second)
	appr := e.sim.CreateAgent("slots-appr", nil)
	c2 := e.conv("c2")
	req, _ := e.requestApproval(appr, c2, "a1", "delete_file")
	ans, err := e.client.Approve(ctx, req.Otid, "")
	if err != nil {
		t.Fatal(err)
	}
	if f, evs := e.waitFinal(c2, ans.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("after approval: %+v; %s", f, summarize(evs))
	}
	note(c2, req, ans)
	c3 := e.conv("c3")
	open, _ := e.requestApproval(appr, c3, "a2", "delete_file") // left open, a message parked behind it
	behind := e.enqueue(queue.Message{AgentID: appr, Conversation: c3, MessageID: "a3", Text: "and then?"})
	note(c3, open, behind)
	c4 := e.conv("c4")
	if _, err := e.client.Notify(ctx, queue.Notice{Chat: c4, Text: "hello", Key: "slots-1"}); err != nil {
		t.Fatal(err)
	}
	note(c4)
	var (
		plain      []queue.EnqueueResult
		plainChats []record.Conversation
	)
	for k := range 8 {
		c := e.conv(fmt.Sprintf("p%d", k))
		r := e.enqueue(queue.Message{AgentID: e.sim.CreateAgent(fmt.Sprintf("slots-%d", k), nil), Conversation: c,
			MessageID: "x", Text: "[[sim answer=ok]] hi"})
		plain = append(plain, r)
		note(c, r)
		plainChats = append(plainChats, c)
	}
	for i, r := range plain {
		if f, _ := e.waitFinal(plainChats[i], r.TaskID, 20*time.Second); f.Type != record.EventAnswer {
			t.Errorf("%s: %+v", r.TaskID, f)
		}
	}
	if f, evs := e.waitFinal(c1, first.TaskID, 30*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("%s: %+v; %s", first.TaskID, f, summarize(evs))
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if keys, _ := e.rdb.Keys(ctx, e.prefix+"{*}:park:behind:*").Result(); len(keys) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the message behind the open request did not park")
		}
	}

	// Read every key under the base prefix (the shards' prefixes begin with it: it has no braces).
	ordPrefix := queue.OrderingPrefix(e.prefix)
	slotsOf := map[record.Conversation]map[int][]string{}
	var keys []string
	iter := e.rdb.Scan(ctx, 0, e.prefix+"*", 500).Iterator()
	for iter.Next(ctx) {
		if k := iter.Val(); !strings.HasPrefix(k, ordPrefix) {
			keys = append(keys, k)
		}
	}
	if err := iter.Err(); err != nil {
		t.Fatal(err)
	}
	sort.Strings(keys)
	seen := map[string]bool{}
	for _, key := range keys {
		sh, sharded := layout.OfTask(key)
		pre := e.prefix
		if sharded {
			pre = layout.Prefix(sh)
		}
		k, ok := match("P", strings.TrimPrefix(key, pre))
		ttl, err := e.rdb.PTTL(ctx, key).Result()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case !ok:
			t.Errorf("%s (TTL %v): no catalog pattern", key, ttl)
			continue
		case ttl == -1 && !k.NoTTL:
			t.Errorf("%s: no TTL, and %q is not allow-listed", key, k.Pattern)
		}
		seen[k.Pattern] = true
		global := globalPatterns[k.Pattern] || strings.HasPrefix(k.Pattern, "P takeover:")
		// (a pending approval is in its chat's shard, or, on a thread that chats share, global)
		if sharded == global && k.Pattern != "P approval:pending:<agent>:<scope>" {
			t.Errorf("%s (%s): under the base prefix %v, want %v", key, k.Pattern, !sharded, global)
		}
		for c, ns := range names {
			for _, n := range ns {
				if n != "" && strings.Contains(key, n) && !strings.HasPrefix(k.Pattern, "P takeover:") {
					if slotsOf[c] == nil {
						slotsOf[c] = map[int][]string{}
					}
					slotsOf[c][hashtag.Slot(key)] = append(slotsOf[c][hashtag.Slot(key)], key)
					break
				}
			}
		}
	}
	for c := range names {
		want := hashtag.Slot("asynq:{" + layout.Queue(layout.Of(c.Integration, c.ChatID)) + "}:pending")
		slots := slotsOf[c]
		if len(slots) == 0 {
			t.Errorf("chat %s: no key found", c)
		}
		for s, ks := range slots {
			if s != want {
				t.Errorf("chat %s: keys %q in slot %d, not its shard's queue's %d", c, ks, s, want)
			}
		}
	}
	for _, want := range []string{"P replies:<integration>:<chat id>", "P journal:idx:<filter>", "P journal:otid:<otid>",
		"P approval:req:<task>", "P approval:otid:<otid>", "P approval:pending:<agent>:<scope>", "P cancel:<task>",
		"P notified:<integration>:<chat id>:<key>", "P thread:<hash>", "P park:behind:<request>", "P seq:<task>"} {
		if !seen[want] {
			t.Errorf("the run wrote no key of %s", want)
		}
	}
	t.Logf("%d keys, %d chats each in its shard's slot", len(keys), len(names))
}
