package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"

	"github.com/lettaq/lettaq/budget"
	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/queue"
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
			default:
				t.Fatal("the intent's reply was never dropped")
			}
			if final.Type != queue.EventAnswer {
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
