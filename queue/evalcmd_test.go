package queue

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/lettaq/lettaq/queue/internal/progress"
	"github.com/lettaq/lettaq/queue/record"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/ordering"
	"github.com/lettaq/lettaq/queue/internal/store"
)

// A turn's last round trip (the final event, the journal's intent and
// record, the task's result, the conversation's release), on a Redis
// without the scripts (restarted, flushed): the ops that other ops follow
// send each script's first call of the round trip as EVAL with its text (a
// later call of the same script, as the task result's after the event's,
// stays EVALSHA), so that nothing overtakes them, with no SCRIPT LOAD (they
// used to be sent again as EVAL in a second round trip, after the plain
// commands had run; then loaded first, by SCRIPT LOAD); the last op,
// followed by nothing, is answered NOSCRIPT and sent again as EVAL; the
// intent and the record, plain commands, go once; and each does what it
// would have done. On a real Redis of the
// test's own (a flush of the shared one would hurt other packages' tests)
// and on miniredis.
func TestTurnOpsAfterScriptFlush(t *testing.T) {
	m := miniredis.RunT(t)
	servers := []*testredis.Server{{Addr: m.Addr(), Mini: m}}
	if !testing.Short() {
		servers = append(servers, testredis.StartPersistent(t).Server())
	}
	for _, srv := range servers {
		name := "miniredis"
		if srv.Real {
			name = "redis"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer rdb.Close()
			r := NewReplies(rdb, RepliesOptions{})
			j := NewJournal(rdb, JournalOptions{})
			seq, err := ordering.New(rdb, ordering.Config{})
			if err != nil {
				t.Fatal(err)
			}
			key := ordering.AgentKey("flush")
			for _, task := range []string{"t", "t2"} {
				if _, err := seq.Join(ctx, key, task); err != nil {
					t.Fatal(err)
				}
			}
			lease, err := seq.Acquire(ctx, key, "t", "w", nil)
			if err != nil {
				t.Fatal(err)
			}
			if err := rdb.HSet(ctx, store.AsynqTaskKey("q", "t"), "state", "active").Err(); err != nil {
				t.Fatal(err)
			}
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
			var h pipeNames
			rdb.AddHook(&h)

			conv := record.Conversation{Integration: "test", ChatID: "flush"}
			final, err := r.prepareMany(conv, record.ReplyEvent{Type: record.EventAnswer, TaskID: "t", Text: "hi"}, r.answeredKey("t"))
			if err != nil {
				t.Fatal(err)
			}
			var prior []record.Intent
			intent, err := j.intentOp("t", "o", 1, "w", &prior)
			if err != nil {
				t.Fatal(err)
			}
			// (The attempt journaled its intent: the save refreshes the intents' expiry too.)
			save, err := j.saver.SaveOp(&record.TurnRecord{TaskID: "t", Otid: "o", Outcome: record.OutcomeAnswered,
				Attempts: []record.Attempt{{N: 1, SentOtid: true}}}, false, 0, nil)
			if err != nil {
				t.Fatal(err)
			}
			var wrote int64
			result := store.ScriptOp(store.WriteResult, append(store.WriteResult.Args(1, 1), store.AsynqTaskKey("q", "t"), []byte(`{"ok":1}`)),
				func(c *redis.Cmd) error {
					var err error
					wrote, err = c.Int64()
					return err
				})
			cmd, next := lease.ReleaseCmd(true)
			var head string
			release := func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
				c := cmd(ctx, sha)
				_ = p.Process(ctx, c)
				return func() error {
					var err error
					head, err = next(c)
					return err
				}
			}
			ops := []store.Op{r.emitManyOp([]*progress.Event{final}, nil), intent, save, result, release}
			for i, err := range store.Run(ctx, rdb, ops) {
				if err != nil {
					t.Fatalf("op %d: %v", i, err)
				}
			}
			// The save has no index knowledge (nil): it removes the record
			// from the indexes it does not match.
			want := "[[eval eval multi set set pexpire zadd zremrangebyrank pexpire zrem zrem zrem zrem exec eval evalsha] [eval]]"
			if got := fmt.Sprint(h.rounds()); got != want {
				t.Errorf("round trips %s, want %s", got, want)
			}
			if got := fmt.Sprint(streamTexts(t, r, conv)); !final.Written() || got != "[hi]" {
				t.Errorf("final written %v, stream %s", final.Written(), got)
			}
			if ins, err := j.Intents(ctx, "t"); err != nil || len(ins) != 1 || len(prior) != 0 {
				t.Errorf("intents %v (%v), prior %v", ins, err, prior)
			}
			if rec, err := j.Get(ctx, "t"); err != nil || rec.Outcome != record.OutcomeAnswered {
				t.Errorf("journal: %v %v", rec, err)
			}
			if res, _ := rdb.HGet(ctx, store.AsynqTaskKey("q", "t"), "result").Result(); wrote != 1 || res != `{"ok":1}` {
				t.Errorf("result %q (script %d)", res, wrote)
			}
			if holder, _, _ := seq.Holder(ctx, key); head != "t2" || holder != "" {
				t.Errorf("after the release: head %q, lock held by %q; want t2, free", head, holder)
			}
		})
	}
}

// pipeNames records the command names of each pipeline a client sends
// (but a connection's handshake).
type pipeNames struct {
	mu sync.Mutex
	r  [][]string
}

func (h *pipeNames) rounds() [][]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.r)
}

func (h *pipeNames) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *pipeNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipeNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var names []string
		for _, c := range cmds {
			if n := c.Name(); n != "client" && n != "hello" { // a new connection's handshake
				names = append(names, n)
			}
		}
		if names == nil {
			return next(ctx, cmds)
		}
		h.mu.Lock()
		h.r = append(h.r, names)
		h.mu.Unlock()
		return next(ctx, cmds)
	}
}

// A script Redis does not have (SCRIPT FLUSH, a restarted Redis) is sent again as EVAL, in
// order. (On miniredis only: a flush of the shared Redis would make another package's test,
// running at the same time, meet NOSCRIPT, and one that counts round trips fail.)
func TestRunOpsAfterScriptFlush(t *testing.T) {
	rjEach(t, func(t *testing.T, b rjBackend) {
		if b.srv.Mini == nil {
			t.Skip("not on the shared Redis: see the test's comment")
		}
		r := NewReplies(b.rdb, RepliesOptions{Prefix: b.prefix})
		j := NewJournal(b.rdb, JournalOptions{Prefix: b.prefix})
		ctx := context.Background()
		if err := b.rdb.ScriptFlush(ctx).Err(); err != nil {
			t.Skip("SCRIPT FLUSH:", err)
		}
		conv := record.Conversation{Integration: "test", ChatID: "flush"}
		var evs []*progress.Event
		for i := range 3 {
			pe, err := r.prepareMany(conv, record.ReplyEvent{Type: record.EventAnswerDelta, TaskID: "t", Text: fmt.Sprint(i)}, "")
			if err != nil {
				t.Fatal(err)
			}
			evs = append(evs, pe)
		}
		save, err := j.saver.SaveOp(&record.TurnRecord{TaskID: "t", Otid: "o"}, false, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		for i, err := range store.Run(ctx, b.rdb, []store.Op{r.emitManyOp(evs[:2], nil), save, r.emitManyOp(evs[2:], nil)}) {
			if err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
		if got := fmt.Sprint(streamTexts(t, r, conv)); got != "[0 1 2]" {
			t.Errorf("stream %s", got)
		}
		if rec, err := j.Get(ctx, "t"); err != nil || rec.Otid != "o" {
			t.Errorf("journal: %v %v", rec, err)
		}
	})
}

func streamTexts(t *testing.T, r *Replies, c record.Conversation) []string {
	t.Helper()
	evs, _, err := r.Read(context.Background(), c, "0", 10000, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, ev := range evs {
		out = append(out, ev.Text)
	}
	return out
}
