package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lettaq/lettaq/internal/hashtag"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// TestShardsSpreadChatsInOrder: 12 chats × 3 messages over 4 shards, two workers: every turn
// goes to its chat's shard's queue under a task id that names it, every shard gets chats, and
// each chat's messages reach its agent in order, each answered once.
func TestShardsSpreadChatsInOrder(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end test")
	}
	t.Parallel()
	const shards, chats, per = 4, 12, 3
	e := newEnv(t, withShards(shards))
	e.startWorker("A")
	e.startWorker("B")
	layout, err := shard.New(shards, e.queue, e.prefix)
	if err != nil {
		t.Fatal(err)
	}
	agents := make([]string, chats)
	cs := make([]record.Conversation, chats)
	marks := make([][]string, chats)
	res := make([][]queue.EnqueueResult, chats)
	for k := range chats {
		agents[k] = e.sim.CreateAgent(fmt.Sprintf("sharded-%d", k), nil)
		cs[k] = e.conv(fmt.Sprintf("sharded-%d", k))
	}
	for i := range per {
		for k := range chats {
			mark := fmt.Sprintf("c%02d-m%d", k, i)
			r := e.enqueue(queue.Message{AgentID: agents[k], Conversation: cs[k], MessageID: mark,
				Text: fmt.Sprintf("[[sim think=%s answer=%s]] %s", simDur(60*time.Millisecond), mark, mark)})
			marks[k] = append(marks[k], mark)
			res[k] = append(res[k], r)
		}
	}
	used := map[int]bool{}
	for k := range chats {
		sh := layout.Of(cs[k].Integration, cs[k].ChatID)
		used[sh] = true
		q := layout.Queue(sh)
		for i, r := range res[k] {
			if r.Queue != q || hashtag.Of(r.TaskID) != q {
				t.Errorf("chat %d message %d: task %s in queue %s, want its shard's %s, named in the id", k, i, r.TaskID, r.Queue, q)
			}
			final, _ := e.waitFinal(cs[k], r.TaskID, 60*time.Second)
			if final.Type != record.EventAnswer || final.Text != marks[k][i] {
				t.Fatalf("chat %d message %d: final %s %q", k, i, final.Type, final.Text)
			}
			if info, err := e.insp.GetTaskInfo(q, r.TaskID); err != nil {
				t.Errorf("chat %d message %d: task %s not in its shard's queue %s: %v", k, i, r.TaskID, q, err)
			} else if hashtag.Slot("asynq:{"+info.Queue+"}:t:"+r.TaskID) != hashtag.Slot(layout.Prefix(sh)) {
				t.Errorf("chat %d: its task and its shard's prefix are in different slots", k)
			}
			if rec := e.record(r.TaskID); rec == nil || rec.Outcome != "answered" {
				t.Errorf("chat %d message %d: journal record %+v", k, i, rec)
			}
		}
		checkOrder(t, e.sim, agents[k], marks[k])
		checkSerialRuns(t, e.sim, agents[k], per)
	}
	if len(used) < 3 {
		t.Errorf("12 chats fell in %d of 4 shards", len(used))
	}
}

// TestShardsLayoutRefusesAnother: a deployment whose first message recorded 4 shards refuses a
// worker with 1 and a client with 2, naming both layouts, and enqueues nothing for them; a worker
// with the same layout starts and answers.
func TestShardsLayoutRefusesAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withShards(4))
	conv := e.conv("ok")
	first := e.enqueue(queue.Message{AgentID: e.sim.CreateAgent("ok", nil), Conversation: conv, Text: "[[sim answer=ok]] hi"}) // records the layout
	cfg := e.workerConfig("B")
	cfg.Shards = 1
	w, err := queue.NewWorker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = w.Run(ctx)
	var me *shard.MismatchError
	if !errors.As(err, &me) || me.Recorded != "scheme=1 shards=4 queue="+e.queue+" prefix="+e.prefix ||
		me.Ours != "scheme=1 shards=1 queue="+e.queue+" prefix="+e.prefix {
		t.Fatalf("a worker with 1 shard on a 4-shard deployment: %v", err)
	}
	c, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue, Shards: 2, Replies: e.replies, Ordering: e.ordering()})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Enqueue(context.Background(), queue.Message{AgentID: "agent-x", Conversation: e.conv("refused"), Text: "hi"})
	if !errors.As(err, &me) {
		t.Fatalf("a client with 2 shards on a 4-shard deployment: %v", err)
	}
	two, _ := shard.New(2, e.queue, e.prefix)
	for _, q := range append(two.Queues(), e.queue) {
		if _, err := e.insp.GetQueueInfo(q); err == nil {
			t.Errorf("queue %s exists: a refused layout enqueued", q)
		}
	}
	e.startWorker("A")
	if final, _ := e.waitFinal(conv, first.TaskID, 30*time.Second); final.Text != "ok" {
		t.Errorf("the recorded layout's worker answered %q", final.Text)
	}
}
