package integration

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// resendIntentHook fails the round trip that journals the turn's second
// intent to send (the resend's), before it reaches Redis: a short outage.
type resendIntentHook struct {
	key     string // the intents list's key
	intents atomic.Int32
	failed  atomic.Bool
}

var errOutage = errors.New("simulated Redis outage")

func (h *resendIntentHook) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *resendIntentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *resendIntentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if !pushesIntent(c, h.key) {
				continue
			}
			if h.intents.Add(1) == 2 {
				h.failed.Store(true)
				for _, c := range cmds {
					c.SetErr(errOutage)
				}
				return errOutage
			}
		}
		return next(ctx, cmds)
	}
}

// pushesIntent reports whether c appends to an intents list under prefix:
// the intent push, a script whose first key is the list (an RPUSH before).
func pushesIntent(c redis.Cmder, prefix string) bool {
	args := c.Args()
	var k any
	switch c.Name() {
	case "rpush":
		k = args[1]
	case "eval", "evalsha":
		if len(args) > 3 {
			k = args[3]
		}
	}
	key, _ := k.(string)
	return key != "" && strings.HasPrefix(key, prefix)
}

// A resend whose intent cannot be journaled is not sent, and the turn is
// retried, not archived: the send is answered 503 before anything is
// stored, the history has no trace of it, and the journal fails on the
// resend's intent. The next attempt looks for the otid and resends: the
// agent answers, once.
func TestResendWhoseIntentFailsIsRetried(t *testing.T) {
	e := newEnv(t)
	agent := e.sim.CreateAgent("resend", nil)
	hook := &resendIntentHook{key: e.prefix + "journal:intents:"}
	rdb := redis.NewClient(&redis.Options{Addr: e.redis.Addr, DB: e.redis.DB})
	rdb.AddHook(hook)
	t.Cleanup(func() { _ = rdb.Close() })
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Stores.Replies = queue.NewReplies(rdb, queue.RepliesOptions{Prefix: e.prefix})
		c.Stores.Journal = queue.NewJournal(rdb, queue.JournalOptions{Prefix: e.prefix, Retention: time.Hour})
	})
	e.sim.SetFault(agent, lettasim.Fault{Status5xxBeforeStore: 503})
	c := e.conv("resend")
	res := e.enqueue(queue.Message{AgentID: agent, Text: "hello there", Conversation: c, MessageID: "m1"})
	final, evs := e.waitFinal(c, res.TaskID, 30*time.Second)
	e.settled()
	rec := e.record(res.TaskID)
	if !hook.failed.Load() {
		t.Fatalf("the resend's intent was never failed (%d intents); %s", hook.intents.Load(), describeAttempts(rec))
	}
	if final.Type != record.EventAnswer || !strings.Contains(final.Text, "hello there") {
		t.Fatalf("final %+v (want the answer); %s\n%s", final, describeAttempts(rec), summarize(evs))
	}
	if n := e.sim.CountOtid(res.Otid); n != 1 {
		t.Fatalf("otid stored %d times, want 1", n)
	}
	if len(rec.Attempts) < 2 || rec.Attempts[0].Outcome == record.OutcomeFailed {
		t.Fatalf("want the first attempt retried, not failed; %s", describeAttempts(rec))
	}
}
