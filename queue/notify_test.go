package queue

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
)

// notifyClient is a Client writing reply events under a prefix of the test's
// own, on rdb (nil: a direct client of srv), and a direct client to look.
func notifyClient(t *testing.T, srv *testredis.Server, rdb redis.UniversalClient) (*Client, *Replies, *redis.Client) {
	t.Helper()
	direct := srv.Client(t)
	prefix := "lettaqtest:" + uuid.NewString() + ":"
	t.Cleanup(func() { rjDeletePrefix(t, direct, prefix) })
	if rdb == nil {
		rdb = direct
	}
	r := NewReplies(rdb, RepliesOptions{Prefix: prefix})
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Replies: r, Ordering: Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, r, direct
}

// A notify is one stream entry of the flat format: type notify, task_id
// notify:<key>, seq 1, empty otid, run_id and message_id, data {"text": …};
// Read decodes it with its text. The same key again is a duplicate naming the
// same entry and writes nothing; the same key with another text is refused
// (NotifyKeyConflictError); the same key in another chat is another message.
func TestNotifyWritesOneEventPerKey(t *testing.T) {
	c, r, direct := notifyClient(t, testredis.New(t), nil)
	ctx := context.Background()
	conv := record.Conversation{Integration: "web", ChatID: "c:1"}
	n := Notice{Chat: conv, Text: "Your report is ready.", Key: "report-2026-12-02"}
	first, err := c.Notify(ctx, n)
	if err != nil {
		t.Fatal(err)
	}
	if first.Duplicate || first.TaskID != "notify:report-2026-12-02" || first.Key != n.Key || first.ID == "" {
		t.Fatalf("first notify: %+v", first)
	}
	msgs, err := direct.XRange(ctx, r.Key(conv), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("stream: %v, %v; want one entry", msgs, err)
	}
	v := msgs[0].Values
	want := map[string]string{"type": "notify", "task_id": "notify:report-2026-12-02", "otid": "", "run_id": "", "message_id": "",
		"seq": "1", "data": `{"text":"Your report is ready."}`}
	for k, w := range want {
		if v[k] != w {
			t.Errorf("field %s = %q, want %q", k, v[k], w)
		}
	}
	if len(v) != 8 {
		t.Errorf("entry has %d fields, want the 8 of the format: %v", len(v), v)
	}
	if _, err := time.Parse(time.RFC3339Nano, v["time"].(string)); err != nil {
		t.Errorf("time %q: %v", v["time"], err)
	}
	evs, _, err := r.Read(ctx, conv, "0", 10, 0)
	if err != nil || len(evs) != 1 || evs[0].Type != record.EventNotify || evs[0].Text != n.Text || evs[0].Seq != 1 || evs[0].ID != first.ID {
		t.Fatalf("read back: %+v, %v", evs, err)
	}

	again, err := c.Notify(ctx, n)
	if err != nil || !again.Duplicate || again.ID != first.ID || again.TaskID != first.TaskID {
		t.Fatalf("same key again: %+v, %v; want a duplicate of %s", again, err, first.ID)
	}
	other := n
	other.Text = "Another text"
	_, err = c.Notify(ctx, other)
	var conflict *NotifyKeyConflictError
	if !errors.As(err, &conflict) || conflict.ID != first.ID || !strings.Contains(err.Error(), "report-2026-12-02") {
		t.Fatalf("same key, other text: %v; want a NotifyKeyConflictError naming the key and entry", err)
	}
	elsewhere := n
	elsewhere.Chat = record.Conversation{Integration: "web", ChatID: "c"}
	if res, err := c.Notify(ctx, elsewhere); err != nil || res.Duplicate {
		t.Fatalf("same key in another chat: %+v, %v; want a message of its own", res, err)
	}
	if n, _ := direct.XLen(ctx, r.Key(conv)).Result(); n != 1 {
		t.Errorf("the first chat's stream holds %d entries, want 1", n)
	}
	ttl, _ := direct.PTTL(ctx, r.keys().Notified("web", "c:1", "report-2026-12-02")).Result()
	if ttl <= 0 || ttl > 7*24*time.Hour {
		t.Errorf("marker TTL %v, want the replies' TTL (7 days)", ttl)
	}
}

// A notify whose reply is lost after Redis ran the script (the connection
// closed; go-redis sends the script again) is one event, and the call reports
// it as written by itself (not a duplicate), with the entry's id.
func TestNotifyLostReplyWritesOnce(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	c, r, _ := notifyClient(t, lr.srv, lr.rdb)
	if err := store.NotifyOnce.Load(ctx, lr.direct).Err(); err != nil {
		t.Fatal(err)
	}
	conv := record.Conversation{Integration: "test", ChatID: "lostreply"}
	f := lr.proxy.DropReply(scriptCall(r.Key(conv)))
	res, err := c.Notify(ctx, Notice{Chat: conv, Text: "ping", Key: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	msgs, err := lr.direct.XRange(ctx, r.Key(conv), "-", "+").Result()
	if err != nil || len(msgs) != 1 {
		t.Fatalf("stream after a lost reply: %d entries (%v); want 1", len(msgs), err)
	}
	if res.Duplicate || res.ID != msgs[0].ID {
		t.Errorf("result %+v; want not a duplicate, id %s", res, msgs[0].ID)
	}
}

// Bad notices are refused before Redis, each naming its field.
func TestNotifyValidation(t *testing.T) {
	c, r, direct := notifyClient(t, testredis.New(t), nil)
	conv := record.Conversation{Integration: "web", ChatID: "1"}
	for _, tc := range []struct {
		name  string
		n     Notice
		field string
		says  string
	}{
		{"no integration", Notice{Chat: record.Conversation{ChatID: "1"}, Text: "x", Key: "k"}, "chat", "no integration"},
		{"no chat id", Notice{Chat: record.Conversation{Integration: "web"}, Text: "x", Key: "k"}, "chat", "no chat id"},
		{"colon in integration", Notice{Chat: record.Conversation{Integration: "a:b", ChatID: "1"}, Text: "x", Key: "k"}, "chat", "must not contain"},
		{"control in chat id", Notice{Chat: record.Conversation{Integration: "web", ChatID: "a\nb"}, Text: "x", Key: "k"}, "chat", "control character"},
		{"empty text", Notice{Chat: conv, Key: "k"}, "text", "must not be empty"},
		{"blank text", Notice{Chat: conv, Text: " \n\t", Key: "k"}, "text", "must not be empty"},
		{"long text", Notice{Chat: conv, Text: strings.Repeat("a", MaxNotifyTextBytes+1), Key: "k"}, "text", "16385 bytes, more than the limit of 16384"},
		{"invalid utf-8", Notice{Chat: conv, Text: "a\xffb", Key: "k"}, "text", "not valid UTF-8"},
		{"nul", Notice{Chat: conv, Text: "a\x00b", Key: "k"}, "text", "NUL"},
		{"no key", Notice{Chat: conv, Text: "x"}, "key", "must not be empty"},
		{"key with colon", Notice{Chat: conv, Text: "x", Key: "a:b"}, "key", `holds ':'`},
		{"key with space", Notice{Chat: conv, Text: "x", Key: "a b"}, "key", `holds ' '`},
		{"long key", Notice{Chat: conv, Text: "x", Key: strings.Repeat("k", MaxNotifyKeyBytes+1)}, "key", "129 bytes, more than 128"},
	} {
		_, err := c.Notify(context.Background(), tc.n)
		ve, ok := IsValidationError(err)
		if !ok || ve.Field != tc.field || !strings.Contains(err.Error(), tc.says) {
			t.Errorf("%s: %v; want a ValidationError of %s saying %q", tc.name, err, tc.field, tc.says)
		}
	}
	if ok, err := c.Notify(context.Background(), Notice{Chat: conv, Text: strings.Repeat("é", MaxNotifyTextBytes/2), Key: "A-z.0_9~"}); err != nil {
		t.Errorf("a text of exactly the limit, a key of every allowed kind: %+v, %v", ok, err)
	}
	if n, _ := direct.XLen(context.Background(), r.Key(conv)).Result(); n != 1 {
		t.Errorf("the stream holds %d entries, want the one valid notify", n)
	}
	// Emit does not write notify events: they go through Notify, once per key.
	if _, err := r.Emit(context.Background(), conv, record.ReplyEvent{Type: record.EventNotify, TaskID: "notify:x", Text: "x"}); !errors.Is(err, record.ErrInvalidEvent) {
		t.Errorf("Emit of a notify: %v, want ErrInvalidEvent", err)
	}
}

// On Redis Cluster, with a hash-tagged prefix, the notify script's keys
// (the stream and the key's marker) share a slot: a notify is written once,
// and its retry is a duplicate.
func TestNotifyOnCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-node Redis Cluster")
	}
	cl := testredis.StartCluster(t, 3)
	r := NewReplies(cl.Client(t), RepliesOptions{Prefix: "{lettaq}:"})
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClusterClientOpt{Addrs: cl.Addrs}, Replies: r, Ordering: Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	ctx := context.Background()
	conv := record.Conversation{Integration: "telegram", ChatID: "42"}
	var ids []string
	for i := range 2 {
		res, err := c.Notify(ctx, Notice{Chat: conv, Text: "hello", Key: "k1"})
		if err != nil || res.Duplicate != (i == 1) {
			t.Fatalf("notify %d on the cluster: %+v, %v", i+1, res, err)
		}
		ids = append(ids, res.ID)
	}
	evs, _, err := r.Read(ctx, conv, "0", 10, 0)
	if err != nil || len(evs) != 1 || evs[0].ID != ids[0] || ids[1] != ids[0] {
		t.Fatalf("stream on the cluster: %+v, %v; want one notify %s", evs, err, ids[0])
	}
}
