package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// notifyClient is a Client writing reply events under a prefix of the
// test's own (its keys deleted when the test ends), its Replies, and a
// direct client to look.
func notifyClient(t *testing.T, srv *testredis.Server) (*queue.Client, *queue.Replies, *redis.Client) {
	t.Helper()
	direct := srv.Client(t)
	prefix := "lettaqtest:" + uuid.NewString() + ":"
	t.Cleanup(func() {
		ctx := context.Background()
		iter := direct.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			direct.Del(ctx, iter.Val())
		}
	})
	r := queue.NewReplies(direct, queue.RepliesOptions{Prefix: prefix})
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}, Replies: r, Ordering: queue.Ordering{Off: true}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c, r, direct
}

// POST /notify (NotifyHandler): 202 with the entry; the same body again
// answers 202 with the same task id and entry (duplicate true); the same key
// with another text 409 naming key; bad input 400 naming the field; no key:
// one is minted and answered.
func TestNotifyHTTP(t *testing.T) {
	c, r, direct := notifyClient(t, testredis.New(t))
	h := NotifyHandler(c)
	ctx := context.Background()
	body := `{"chat": "web:c-1", "text": "Build finished ✅", "key": "build-42"}`
	code, first, text := postEnqueue(h, "application/json", []byte(body))
	if code != http.StatusAccepted || first["task_id"] != "notify:build-42" || first["duplicate"] != false || first["id"] == "" {
		t.Fatalf("first POST: %d %s", code, text)
	}
	code, again, text := postEnqueue(h, "application/json", []byte(body))
	if code != http.StatusAccepted || again["id"] != first["id"] || again["task_id"] != first["task_id"] || again["duplicate"] != true {
		t.Fatalf("replayed POST: %d %s; want 202 naming entry %v", code, text, first["id"])
	}
	conv := record.Conversation{Integration: "web", ChatID: "c-1"}
	if n, _ := direct.XLen(ctx, r.Key(conv)).Result(); n != 1 {
		t.Errorf("stream holds %d entries after the replay, want 1", n)
	}
	if code, out, text := postEnqueue(h, "application/json", []byte(`{"chat": {"integration": "web", "chat_id": "c-1"}, "text": "other", "key": "build-42"}`)); code != http.StatusConflict || out["field"] != "key" {
		t.Errorf("same key, other text: %d %s; want 409 naming key", code, text)
	}
	code, minted, text := postEnqueue(h, "application/json", []byte(`{"chat": "web:c-1", "text": "no key"}`))
	if key, _ := minted["key"].(string); code != http.StatusAccepted || len(key) != 36 || minted["task_id"] != "notify:"+key {
		t.Errorf("no key: %d %s; want 202 with a minted key", code, text)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"text": "x", "key": "k"}`, "chat"},
		{`{"chat": "web", "text": "x", "key": "k"}`, "chat"},
		{`{"chat": "web:", "text": "x", "key": "k"}`, "chat"},
		{`{"chat": "web:\ud800", "text": "x", "key": "k"}`, "chat"},
		{`{"chat": {"integration": "web", "chat_id": 7}, "text": "x", "key": "k"}`, "chat"},
		{`{"chat": "web:1", "key": "k"}`, "text"},
		{`{"chat": "web:1", "text": "  ", "key": "k"}`, "text"},
		{`{"chat": "web:1", "text": 5, "key": "k"}`, "text"},
		{`{"chat": "web:1", "text": "` + strings.Repeat("a", queue.MaxNotifyTextBytes+1) + `", "key": "k"}`, "text"},
		{`{"chat": "web:1", "text": "x", "key": "a/b"}`, "key"},
		{`{"chat": "web:1", "text": "x", "key": "k", "txt": "y"}`, "txt"},
		{`{"chat": "web:1", "text": "x", "text": "y", "key": "k"}`, "text"},
	} {
		code, out, text := postEnqueue(h, "application/json", []byte(tc.body))
		if code != http.StatusBadRequest || out["field"] != tc.field {
			t.Errorf("%s: %d %s; want 400 naming %s", tc.body, code, text, tc.field)
		}
	}
	if code, _, text := postEnqueue(h, "text/plain", []byte(body)); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d %s", code, text)
	}
	var res queue.NotifyResult
	if err := json.Unmarshal([]byte(mustJSON(t, first)), &res); err != nil || res.Key != "build-42" {
		t.Errorf("the answer does not decode as a NotifyResult: %+v, %v", res, err)
	}
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
