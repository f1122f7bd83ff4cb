package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// TestApprovalAnswerThatGivesUpStaysAnswerable: Letta
// answers 503 to an approval answer until its turn gives up. The answer
// never reached Letta, so the request stays pending: the user answers again
// (a new answer turn, not a duplicate), the tool runs, and a later message
// of the chat is answered.
func TestApprovalAnswerThatGivesUpStaysAnswerable(t *testing.T) {
	t.Parallel()
	e := approvalEnv(t)
	agent := e.sim.CreateAgent("appr-giveup", nil)
	c := e.conv("giveup")
	req, _ := e.requestApproval(agent, c, "m1", "delete_file")

	// A client whose turns are retried once.
	short, err := queue.NewClient(queue.ClientConfig{Redis: e.redisOpt(), Budget: e.budget, Queue: e.queue,
		Retention: time.Hour, Replies: e.replies, Ordering: e.ordering(), MaxRetry: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = short.Close() })
	e.sim.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503, Persistent: true})
	first, err := short.Approve(context.Background(), req.TaskID, "")
	if err != nil || first.Duplicate {
		t.Fatalf("first answer: %+v, %v", first, err)
	}
	if f, evs := e.waitFinal(c, first.TaskID, 60*time.Second); f.Type != record.EventError || !f.Permanent {
		t.Fatalf("first answer's final %+v; %s", f, summarize(evs))
	}
	e.sim.ClearFault(agent)
	if n := len(e.sim.ApprovalMessages(agent)); n != 0 {
		t.Fatalf("%d approval messages reached the simulator, want 0", n)
	}

	again, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil || again.Duplicate || again.TaskID == first.TaskID {
		t.Fatalf("answer after the failed one: %+v, %v; want a new answer turn", again, err)
	}
	if f, evs := e.waitFinal(c, again.TaskID, 30*time.Second); f.Type != record.EventAnswer || !ranTool(evs, "delete_file") {
		t.Fatalf("second answer's final %+v; %s", f, summarize(evs))
	}
	later := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "[[sim answer=done]] and now?"})
	if f, evs := e.waitFinal(c, later.TaskID, 30*time.Second); f.Type != record.EventAnswer || f.Text != "done" {
		t.Fatalf("later message's final %+v; %s", f, summarize(evs))
	}
	if ra := e.record(req.TaskID).Approval; ra == nil || ra.AnsweredBy != again.TaskID {
		t.Errorf("request journal %+v, want answered by %s", ra, again.TaskID)
	}
}

// failAnsweredWrite fails the first SET of an approval request that records
// its answer (approval.Store.Answered).
type failAnsweredWrite struct {
	key   string
	fired atomic.Bool
}

func (h *failAnsweredWrite) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failAnsweredWrite) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failAnsweredWrite) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); cmd.Name() == "set" && len(a) > 2 && a[1] == h.key &&
			strings.Contains(asString(a[2]), `"answered_by"`) && h.fired.CompareAndSwap(false, true) {
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

func asString(v any) string {
	if b, ok := v.([]byte); ok {
		return string(b)
	}
	return fmt.Sprint(v)
}

// TestApprovalAnsweredRecordFailsAfterTheAnswer: the
// answer turn delivered its answer (Letta took it) but the write that marks
// the request answered failed. The next message of the chat must not wait
// for that request for good: it finds the answer turn finished in the
// journal, records the request answered, and runs.
func TestApprovalAnsweredRecordFailsAfterTheAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	t.Cleanup(func() { _ = rdb.Close() })
	agent := e.sim.CreateAgent("appr-lost", nil)
	c := e.conv("lost")
	hook := &failAnsweredWrite{key: e.prefix + "approval:req:" + queue.TaskIDFor(queue.Message{Conversation: c, MessageID: "m1"})}
	rdb.AddHook(hook)
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
	})
	req, _ := e.requestApproval(agent, c, "m1", "delete_file")
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil {
		t.Fatal(err)
	}
	if f, evs := e.waitFinal(c, ans.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("answer's final %+v; %s", f, summarize(evs))
	}
	later := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "[[sim answer=done]] and now?"})
	if f, evs := e.waitFinal(c, later.TaskID, 20*time.Second); f.Type != record.EventAnswer || f.Text != "done" {
		t.Fatalf("later message's final %+v; %s", f, summarize(evs))
	}
	if !hook.fired.Load() {
		t.Fatal("the answered record was never written")
	}
	if again, err := e.client.Approve(context.Background(), req.TaskID, ""); err != nil || !again.Duplicate || again.TaskID != ans.TaskID {
		t.Errorf("an answer after the answer: %+v, %v; want a duplicate of %s", again, err, ans.TaskID)
	}
}

// failSecondGet fails the second GET of key (and only it).
type failSecondGet struct {
	key   string
	gets  atomic.Int32
	fired atomic.Bool
}

func (h *failSecondGet) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *failSecondGet) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}
func (h *failSecondGet) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if a := cmd.Args(); cmd.Name() == "get" && len(a) == 2 && a[1] == h.key && h.gets.Add(1) == 2 {
			h.fired.Store(true)
			err := errors.New("injected: connection reset")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestApprovalRequestRedeliveredAfterItsAnswer: the
// requesting turn recorded its approval request, but could not schedule
// its expiry (a Redis read failed), so the turn is retried before its
// approval_required event was written. Meanwhile the request is answered
// (by its task id, e.g. an operator's lettaq approve) and the answer runs.
// The retried delivery must not make the answered request pending again
// (it would block the chat, with no expiry left to end it): a later message
// of the chat runs.
func TestApprovalRequestRedeliveredAfterItsAnswer(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withThreadMode(queue.ThreadConversation))
	agent := e.sim.CreateAgent("appr-redeliver", nil)
	c := e.conv("redeliver")
	m1 := queue.Message{AgentID: agent, Conversation: c, MessageID: "m1", Text: "[[sim approval=delete_file]] tidy up"}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	t.Cleanup(func() { _ = rdb.Close() })
	hook := &failSecondGet{key: e.prefix + "approval:req:" + queue.TaskIDFor(m1)}
	rdb.AddHook(hook)
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
	})
	req := e.enqueue(m1)
	waitState(t, e, req.TaskID, asynq.TaskStateRetry, 20*time.Second)
	if !hook.fired.Load() {
		t.Fatal("the expiry's read was never failed")
	}
	ans, err := e.client.Approve(context.Background(), req.TaskID, "")
	if err != nil || ans.Duplicate {
		t.Fatalf("answer: %+v, %v", ans, err)
	}
	if f, evs := e.waitFinal(c, ans.TaskID, 20*time.Second); f.Type != record.EventAnswer {
		t.Fatalf("answer's final %+v; %s", f, summarize(evs))
	}
	if f, evs := e.waitFinal(c, req.TaskID, 20*time.Second); f.Type != record.EventApprovalRequired {
		t.Fatalf("request's final %+v; %s", f, summarize(evs))
	}
	later := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "m2", Text: "[[sim answer=done]] and now?"})
	if f, evs := e.waitFinal(c, later.TaskID, 20*time.Second); f.Type != record.EventAnswer || f.Text != "done" {
		t.Fatalf("later message's final %+v; %s", f, summarize(evs))
	}
}
