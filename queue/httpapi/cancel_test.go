package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// POST /cancel (CancelHandler): a waiting turn is stopped at once (200, status
// cancelled: its task is gone, its final event written); an answered one is a 409 that
// changes nothing; an unknown id a 404; a request that names nothing a 400; a chat without
// agent_id a 400 naming the field.
func TestCancelHTTP(t *testing.T) {
	srv := testredis.RequireReal(t)
	opt := asynq.RedisClientOpt{Addr: srv.Addr, DB: srv.DB}
	q := "lettaq-unit-cancel-" + time.Now().Format("150405.000000")
	prefix := "lettaq-unit:" + q + ":"
	rdb := srv.Client(t)
	replies := queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix})
	ord := queue.Ordering{Config: ordering.Config{Prefix: prefix + "ord:"}}
	c, err := queue.NewClient(queue.ClientConfig{Redis: opt, Queue: q, Replies: replies, Ordering: ord})
	if err != nil {
		t.Fatal(err)
	}
	insp := asynq.NewInspector(opt)
	t.Cleanup(func() {
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		_ = c.Close()
		rdb.Del(context.Background(), shard.RecordKey(q))
	})
	h := CancelHandler(c)
	ctx := context.Background()
	conv := record.Conversation{Integration: "cli", ChatID: "c-" + q}
	m := queue.Message{AgentID: "agent-00000000-0000-4000-8000-000000000000", Conversation: conv, MessageID: "m1", Text: "hi"}
	res, err := c.Enqueue(ctx, m)
	if err != nil {
		t.Fatal(err)
	}

	code, out, text := postEnqueue(h, "application/json", []byte(`{"task_id": "`+res.TaskID+`", "by": "ops"}`))
	if code != http.StatusOK {
		t.Fatalf("cancel of a waiting turn: %d %s", code, text)
	}
	turns, _ := out["turns"].([]any)
	if len(turns) != 1 || turns[0].(map[string]any)["status"] != string(queue.CancelDone) {
		t.Fatalf("answer %s, want one turn cancelled", text)
	}
	if _, err := insp.GetTaskInfo(q, res.TaskID); err == nil {
		t.Error("the cancelled task is still in Asynq")
	}
	ev, found, err := replies.FinalEvent(ctx, conv, res.TaskID)
	if err != nil || !found || ev.Type != record.EventError || !ev.Permanent || ev.StopReason != record.StopReasonCancelled {
		t.Errorf("final event %+v (found %v, err %v), want error, permanent, cancelled", ev, found, err)
	}
	rec, err := queue.NewJournal(rdb, queue.JournalOptions{Prefix: prefix}).Get(ctx, res.TaskID)
	if err != nil || rec.Outcome != record.OutcomeCancelled || rec.Cancel == nil || rec.Cancel.By != "ops" || rec.Cancel.Phase != record.CancelPhaseWaiting {
		t.Errorf("journal %+v (err %v), want cancelled by ops while waiting", rec, err)
	}
	seq, err := ordering.New(rdb, ord.Config)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := seq.Len(ctx, ord.Key(m)); n != 0 {
		t.Errorf("the chat's line holds %d turns, want 0", n)
	}

	// Again: it has ended (cancelled): 409, nothing changes.
	code, out, text = postEnqueue(h, "application/json", []byte(`{"task_id": "`+res.TaskID+`"}`))
	if code != http.StatusConflict || out["error"] == nil {
		t.Errorf("second cancel: %d %s, want 409", code, text)
	}
	for _, tc := range []struct {
		body  string
		code  int
		field string
	}{
		{`{"task_id": "turn:cli:nobody:none"}`, http.StatusNotFound, ""},
		{`{"otid": "no-such-otid"}`, http.StatusNotFound, ""},
		{`{}`, http.StatusBadRequest, "task_id"},
		{`{"chat": "cli:` + conv.ChatID + `"}`, http.StatusBadRequest, "agent_id"},
		{`{"chat": "nocolon", "agent_id": "agent-x"}`, http.StatusBadRequest, "chat"},
		{`{"chat": {"integration": "cli", "chat_id": "` + conv.ChatID + `"}, "agent_id": "` + m.AgentID + `"}`, http.StatusNotFound, ""},
	} {
		code, out, text := postEnqueue(h, "application/json", []byte(tc.body))
		if code != tc.code || (tc.field != "" && out["field"] != tc.field) {
			t.Errorf("%s: %d %s, want %d (field %q)", tc.body, code, text, tc.code, tc.field)
		}
	}
	if code, _, _ := postEnqueue(h, "text/plain", []byte(`{}`)); code != http.StatusUnsupportedMediaType {
		t.Errorf("text/plain: %d, want 415", code)
	}
}
