package queue

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/record"

	"github.com/google/uuid"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/faultproxy"
	"github.com/lettaq/lettaq/internal/redisopt"
	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/shard"
)

// lostReplyRedis is a Redis behind a fault proxy: the worker's own client
// (LeanRedis, go-redis's default retries on, as in production) through the
// proxy, a direct client to look, and a key prefix of the test's own.
type lostReplyRedis struct {
	proxy  *faultproxy.Proxy
	srv    *testredis.Server
	rdb    redis.UniversalClient // the worker's client, through the proxy
	direct *redis.Client
	prefix string
}

func newLostReplyRedis(t *testing.T) lostReplyRedis {
	t.Helper()
	srv := testredis.New(t)
	p := faultproxy.Start(t, srv.Addr)
	rdb, ok := redisopt.Lean(asynq.RedisClientOpt{Addr: p.Addr, DB: srv.DB}).MakeRedisClient().(redis.UniversalClient)
	if !ok {
		t.Fatal("redisopt.Lean made no go-redis client")
	}
	t.Cleanup(func() { _ = rdb.Close() })
	direct := srv.Client(t)
	prefix := "lettaqtest:" + uuid.NewString() + ":"
	t.Cleanup(func() { rjDeletePrefix(t, direct, prefix) })
	return lostReplyRedis{proxy: p, srv: srv, rdb: rdb, direct: direct, prefix: prefix}
}

// scriptCall matches a script call (EVALSHA or EVAL) naming key.
func scriptCall(key string) faultproxy.Match {
	return faultproxy.Any(faultproxy.Command("evalsha", key), faultproxy.Command("eval", key))
}

// waitFired waits for f, failing the test after a while.
func waitFired(t *testing.T, f *faultproxy.Fault) {
	t.Helper()
	select {
	case <-f.Fired():
	case <-time.After(10 * time.Second):
		t.Fatal("the fault never fired")
	}
}

// A round trip of events whose reply is lost after Redis ran it, sent again
// by go-redis, writes each event once: the deltas still join to the answer
// and their seqs still count 1, 2.
func TestLostReplyEventsWrittenOnce(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	r := NewReplies(lr.rdb, RepliesOptions{Prefix: lr.prefix})
	if err := store.ReplyEmitMany.Load(ctx, lr.direct).Err(); err != nil {
		t.Fatal(err)
	}
	conv := record.Conversation{Integration: "test", ChatID: "lostreply"}
	wr := progress.NewWriter(lr.rdb, r.st, r.complete)
	p := wr.NewQueue(conv, func(err error) { t.Errorf("write failed: %v", err) }, nil)
	f := lr.proxy.DropReply(scriptCall(r.Key(conv)))
	p.Push(record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "Hel"})
	p.Push(record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "lo"})
	p.Flush(ctx)
	waitFired(t, f)
	evs, _, err := NewReplies(lr.direct, RepliesOptions{Prefix: lr.prefix}).Read(ctx, conv, "0", 100, 0)
	if err != nil {
		t.Fatal(err)
	}
	var text strings.Builder
	var seqs []int64
	for _, ev := range evs {
		text.WriteString(ev.Text)
		seqs = append(seqs, ev.Seq)
	}
	if text.String() != "Hello" || len(evs) != 2 || seqs[0] != 1 || seqs[1] != 2 {
		t.Fatalf("events after a lost reply: %d entries, seqs %v, joined %q; want 2, [1 2], \"Hello\"",
			len(evs), seqs, text.String())
	}
	p.Close()
}

// After Redis lost its last writes (a crash with appendfsync everysec, a
// failover to a lagging replica: the seq counter, the emitted marks and the
// stream's tail back where they were a moment before), the attempt's next
// event still takes a seq above every seq it was told: a consumer that
// showed seq 3 and ignores seq <= 3 does not drop it.
func TestSeqGrowsAcrossLostWrites(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	r := NewReplies(lr.rdb, RepliesOptions{Prefix: lr.prefix})
	conv := record.Conversation{Integration: "test", ChatID: "rollback"}
	wr := progress.NewWriter(lr.rdb, r.st, r.complete)
	p := wr.NewQueue(conv, func(err error) { t.Errorf("write failed: %v", err) }, nil)
	p.Push(record.ReplyEvent{Type: record.EventPhase, TaskID: "t1", Phase: record.PhaseThinking})
	p.Flush(ctx)
	// What Redis had a moment before the loss.
	key, seqKey, emittedKey := r.Key(conv), r.keys().Seq("t1"), r.keys().Emitted("t1")
	kept, err := lr.direct.XRange(ctx, key, "-", "+").Result()
	if err != nil || len(kept) != 1 {
		t.Fatalf("stream before: %v, %v", kept, err)
	}
	seqBefore, _ := lr.direct.Get(ctx, seqKey).Result()
	emittedBefore, _ := lr.direct.HGetAll(ctx, emittedKey).Result()
	p.Push(record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "Hel"})
	p.Push(record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t1", Text: "lo"})
	p.Flush(ctx)
	shown, err := lr.direct.XRange(ctx, key, "-", "+").Result()
	if err != nil || len(shown) != 3 {
		t.Fatalf("stream: %v, %v", shown, err)
	}
	showed := replyEventFromEntry(shown[2]).Seq // the consumer showed it
	// The loss: the counter, the marks and the stream's tail go back.
	for _, m := range shown[1:] {
		lr.direct.XDel(ctx, key, m.ID)
	}
	lr.direct.Set(ctx, seqKey, seqBefore, time.Hour)
	lr.direct.Del(ctx, emittedKey)
	for f, v := range emittedBefore {
		lr.direct.HSet(ctx, emittedKey, f, v)
	}
	final, err := p.Prepare(record.ReplyEvent{Type: record.EventAnswer, TaskID: "t1", Text: "Hello"}, r.answeredKey("t1"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Do(ctx, []*progress.Event{final}); err != nil {
		t.Fatal(err)
	}
	if !final.Written() || final.Seq() <= showed {
		t.Fatalf("consumer showed seq %d; the answer came with seq %d (written %v)", showed, final.Seq(), final.Written())
	}
	p.Close()
}

// A single Emit or EmitAnswerOnce whose reply is lost after Redis ran it is
// written once, and reports that it wrote it (the retry does not read its
// own marker as another attempt's answer).
func TestLostReplySingleEmitWrittenOnce(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	r := NewReplies(lr.rdb, RepliesOptions{Prefix: lr.prefix})
	if err := store.ReplyEmitMany.Load(ctx, lr.direct).Err(); err != nil {
		t.Fatal(err)
	}
	conv := record.Conversation{Integration: "test", ChatID: "single"}
	f := lr.proxy.DropReply(scriptCall(r.Key(conv)))
	if _, err := r.Emit(ctx, conv, record.ReplyEvent{Type: record.EventPhase, TaskID: "t1", Phase: record.PhaseThinking}); err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	f = lr.proxy.DropReply(scriptCall(r.Key(conv)))
	emitted, err := r.EmitAnswerOnce(ctx, conv, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t1", Text: "hi"})
	if err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	n, _ := lr.direct.XLen(ctx, r.Key(conv)).Result()
	if n != 2 || !emitted {
		t.Fatalf("after lost replies: %d entries, answer emitted %v; want 2, true", n, emitted)
	}
}

// An intent whose push's reply is lost after Redis ran it, sent again by
// go-redis, is recorded once, and the attempt does not read its own intent
// as another attempt's (which made it look for the otid before sending,
// and fail under the resend policy never).
func TestLostReplyIntentRecordedOnce(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	j := NewJournal(lr.rdb, JournalOptions{Prefix: lr.prefix})
	key := j.st.Keys.Journal().Intents("t1")
	f := lr.proxy.DropReply(faultproxy.Any(faultproxy.Command("rpush", key), scriptCall(key)))
	prior, err := j.RecordIntent(ctx, "t1", "otid-1", 1, "w1")
	if err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	n, _ := lr.direct.LLen(ctx, key).Result()
	if len(prior) != 0 || n != 1 {
		t.Fatalf("intent pushed once, its reply lost: %d prior intents %v, %d in the list; want none and 1", len(prior), prior, n)
	}
	// A refusal sent again is recorded once too.
	f = lr.proxy.DropReply(faultproxy.Any(faultproxy.Command("rpush", key), scriptCall(key)))
	if err := j.RecordRefusal(ctx, "t1", "otid-1", 1, "w1"); err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	if n, _ := lr.direct.LLen(ctx, key).Result(); n != 2 {
		t.Fatalf("refusal pushed once, its reply lost: %d in the list; want 2", n)
	}
	// A second attempt sees the first's intent (and refusal).
	prior, err = j.RecordIntent(ctx, "t1", "otid-1", 2, "w1")
	if err != nil || len(prior) != 2 || prior[0].Attempt != 1 {
		t.Fatalf("second attempt's prior = %v, %v; want the first's intent and refusal", prior, err)
	}
}

// An enqueue whose reply is lost after Redis ran it, sent again by go-redis,
// is not reported as a duplicate of itself: the message is new, its
// accepted event is written at once, and a caller that drops duplicates
// does not drop it.
func TestLostReplyEnqueueIsNotItsOwnDuplicate(t *testing.T) {
	lr := newLostReplyRedis(t)
	ctx := context.Background()
	q := "lettaq-lostreply-" + uuid.NewString()[:8]
	replies := NewReplies(lr.rdb, RepliesOptions{Prefix: lr.prefix})
	c, err := NewClient(ClientConfig{Redis: asynq.RedisClientOpt{Addr: lr.proxy.Addr, DB: lr.srv.DB}, Queue: q,
		Ordering: Ordering{Config: ordering.Config{Prefix: lr.prefix + "ord:"}}, Replies: replies})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: lr.srv.Addr, DB: lr.srv.DB})
	defer func() {
		_ = insp.DeleteQueue(q, true)
		_ = insp.Close()
		lr.rdb.Del(context.Background(), shard.RecordKey(q))
	}()
	conv := record.Conversation{Integration: "web", ChatID: "lost"}
	// A first message loads Asynq's scripts.
	if _, err := c.Enqueue(ctx, Message{AgentID: "agent", Text: "first", Conversation: conv, MessageID: "1"}); err != nil {
		t.Fatal(err)
	}
	f := lr.proxy.DropReply(faultproxy.Any(faultproxy.Command("evalsha", "{"+q+"}:t:"), faultproxy.Command("eval", "{"+q+"}:t:")))
	res, err := c.Enqueue(ctx, Message{AgentID: "agent", Text: "second", Conversation: conv, MessageID: "2"})
	if err != nil {
		t.Fatal(err)
	}
	waitFired(t, f)
	if res.Duplicate {
		t.Fatalf("a new message whose enqueue's reply was lost: %+v; want it not a duplicate", res)
	}
	if ok, _ := lr.direct.Exists(ctx, replies.acceptedKey(res.TaskID)).Result(); ok != 1 {
		t.Error("no accepted event for the new message")
	}
	// The same message again is a duplicate.
	if res, err := c.Enqueue(ctx, Message{AgentID: "agent", Text: "second", Conversation: conv, MessageID: "2"}); err != nil || !res.Duplicate {
		t.Fatalf("the same message again: %+v, %v; want a duplicate", res, err)
	}
}
