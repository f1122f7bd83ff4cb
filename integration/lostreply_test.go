package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/integration/lettasim"
	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
)

// A worker whose Redis connection closes after Redis recorded a turn's send
// intent, before its reply came (go-redis then sends the push again),
// still sends the message once and answers: under the resend policy never,
// and with the default policy without a resend in the journal.
func TestLostReplyOfTheIntent(t *testing.T) {
	for _, pol := range []budget.ResendPolicy{budget.ResendNever, ""} {
		t.Run(fmt.Sprintf("policy=%q", pol), func(t *testing.T) {
			e := newEnv(t, withoutOrdering(), withBudget(func(b *budget.Config) {
				if pol != "" {
					b.ResendPolicy = pol
				}
			}))
			p := faultproxy.Start(t, e.redis.Addr)
			e.startWorker("w1", func(c *queue.WorkerConfig) { c.Redis = asynq.RedisClientOpt{Addr: p.Addr, DB: e.redis.DB} })
			agent := e.sim.CreateAgent("lost", nil)
			c := e.conv("lost")
			intents := e.prefix + "journal:intents:"
			f := p.DropReply(faultproxy.Any(faultproxy.Command("rpush", intents),
				faultproxy.Command("evalsha", intents), faultproxy.Command("eval", intents)))
			res := e.enqueue(queue.Message{AgentID: agent, Text: "hello", Conversation: c, MessageID: "m1"})
			final, _ := e.waitFinal(c, res.TaskID, 30*time.Second)
			select {
			case <-f.Fired():
			case <-time.After(5 * time.Second):
				t.Fatal("the intent's reply was never dropped")
			}
			if final.Type != record.EventAnswer {
				t.Errorf("final event %s %q, want an answer", final.Type, final.Text)
			}
			e.oneMessagePerOtid(c, res)
			rec := e.record(res.TaskID)
			for _, a := range rec.Attempts {
				if a.ResendDecision != "" {
					t.Errorf("an attempt: resend %q after its own intent's lost reply, want none", a.ResendDecision)
				}
			}
			if len(rec.Attempts) != 1 {
				t.Errorf("%d attempts, want 1", len(rec.Attempts))
			}
		})
	}
}

// A worker whose Redis connection closes after Redis wrote a round trip of
// answer deltas, before its reply came (go-redis then sends the round trip
// again), writes each event once: the deltas join to the answer, and every
// event of the turn has a seq of its own, in stream order.
func TestLostReplyOfTheEvents(t *testing.T) {
	e := newEnv(t, withoutOrdering())
	p := faultproxy.Start(t, e.redis.Addr)
	e.startWorker("w1", func(c *queue.WorkerConfig) { c.Redis = asynq.RedisClientOpt{Addr: p.Addr, DB: e.redis.DB} })
	agent := e.sim.CreateAgent("lostev", &lettasim.Script{Tokens: true, Steps: []lettasim.Step{
		{Kind: lettasim.Assistant, Text: "Hello there, how are you today?"},
	}})
	c := e.conv("lostev")
	f := p.DropReply(faultproxy.Any(faultproxy.Command("evalsha", "answer_delta"), faultproxy.Command("eval", "answer_delta")))
	res := e.enqueue(queue.Message{AgentID: agent, Text: "hi", Conversation: c, MessageID: "m1"})
	final, _ := e.waitFinal(c, res.TaskID, 30*time.Second)
	select {
	case <-f.Fired():
	case <-time.After(5 * time.Second):
		t.Fatal("no round trip of deltas lost its reply")
	}
	e.oneMessagePerOtid(c, res)
	var joined strings.Builder
	var last int64
	for _, ev := range e.events(c, res.TaskID) {
		if ev.Seq <= last {
			t.Errorf("seq %d after %d (%s)", ev.Seq, last, ev.Type)
		}
		last = ev.Seq
		if ev.Type == record.EventAnswerDelta && !ev.Narration {
			joined.WriteString(ev.Text)
		}
	}
	if joined.String() != final.Text {
		t.Errorf("deltas join to %q, the answer is %q", joined.String(), final.Text)
	}
}

// A worker whose Redis connection closes after Redis ran a head's take of
// the messages waiting behind it (coalescing), before its reply came
// (go-redis then sends the take again), still sends their texts with the
// head's: the agent gets the merged message, and each merged message gets
// its final event.
func TestLostReplyOfTheTake(t *testing.T) {
	e := newEnv(t)
	p := faultproxy.Start(t, e.redis.Addr)
	e.startWorker("w1", func(c *queue.WorkerConfig) {
		c.Redis = asynq.RedisClientOpt{Addr: p.Addr, DB: e.redis.DB}
		c.Ordering.Coalesce = []string{"test"}
	})
	agent := e.sim.CreateAgent("losttake", nil)
	c := e.conv("losttake")
	long := e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: "first",
		Text: fmt.Sprintf("[[sim think=%s answer=one]] first", simDur(1500*time.Millisecond))})
	e.waitAttempt(long.TaskID, 1, "streaming")
	f := p.DropReply(faultproxy.Any(faultproxy.Command("evalsha", "group:"), faultproxy.Command("eval", "group:")))
	var rs []queue.EnqueueResult
	for _, txt := range []string{"second", "third", "fourth"} {
		rs = append(rs, e.enqueue(queue.Message{AgentID: agent, Conversation: c, MessageID: txt, Text: txt}))
	}
	e.waitFinal(c, long.TaskID, 20*time.Second)
	finals := make([]record.ReplyEvent, len(rs))
	for i, r := range rs {
		finals[i], _ = e.waitFinal(c, r.TaskID, 20*time.Second)
	}
	select {
	case <-f.Fired():
	case <-time.After(5 * time.Second):
		t.Fatal("the take's reply was never dropped")
	}
	got := e.sim.UserMessages(agent)
	if len(got) != 2 || got[1].Text != "second\n\nthird\n\nfourth" {
		t.Fatalf("the agent received %d user messages (%+v), want 2, the second merged", len(got), got)
	}
	for i, fe := range finals {
		if fe.Type != record.EventAnswer || fe.AnsweredBy != rs[0].TaskID {
			t.Errorf("final of %s: %+v (want an answer, answered_by %s)", rs[i].TaskID, fe, rs[0].TaskID)
		}
	}
}
