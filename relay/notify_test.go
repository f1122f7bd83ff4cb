package relay_test

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/split"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
)

// notify writes a notify into the env's chat as Client.Notify does.
func (e *env) notify(text, key string) queue.NotifyResult {
	e.t.Helper()
	o := e.rdb.Options()
	c, err := queue.NewClient(queue.ClientConfig{Redis: asynq.RedisClientOpt{Addr: o.Addr, DB: o.DB}, Replies: e.replies,
		Ordering: queue.Ordering{Off: true}})
	if err != nil {
		e.t.Fatal(err)
	}
	defer c.Close()
	res, err := c.Notify(e.ctx, queue.Notice{Chat: e.conv, Text: text, Key: key})
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// A notify shows as one message of its text, with no typing before it nor a
// status call after it; the same key sent again, and a relay restarted over
// the same stream, show nothing more.
func TestNotifyIsOneMessage(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	e.notify("Reminder: stand-up in 5 minutes.", "standup-1")
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "Reminder: stand-up in 5 minutes." {
		t.Fatalf("chat shows %q, want the notify's text in one message", got)
	}
	if res := e.notify("Reminder: stand-up in 5 minutes.", "standup-1"); !res.Duplicate {
		t.Fatalf("the same key again: %+v, want a duplicate", res)
	}
	e.drain()
	e.restart()
	e.drain()
	if got := e.texts(); len(got) != 1 || e.count("send") != 1 || e.count("edit") != 0 {
		t.Fatalf("after a retried notify and a restart: %d sends, %d edits, chat shows %q; want one message sent once",
			e.count("send"), e.count("edit"), got)
	}
	if n := e.count("status"); n != 0 {
		t.Errorf("%d status calls for a notify, want none (nothing runs)", n)
	}
}

// A notify longer than the platform's part limit is one message per part,
// cut at word boundaries (split.Message), each part within the limit,
// the parts joining to the text.
func TestLongNotifyIsOneMessagePerPart(t *testing.T) {
	const limit = 40
	e := newEnv(t, relay.Limits{PartLimit: limit})
	text := strings.Repeat("Build 42 passed on every runner. ", 4) // 132 units
	e.notify(text, "build-42")
	e.drain()
	got := e.texts()
	want := split.Message(text, limit)
	if len(want) < 4 || strings.Join(got, "|") != strings.Join(want, "|") || strings.Join(got, "") != text {
		t.Fatalf("chat shows %q, want the parts %q", got, want)
	}
	for _, p := range got {
		if n := len(utf16.Encode([]rune(p))); n > limit {
			t.Errorf("part %q is %d units, more than %d", p, n, limit)
		}
		if !strings.HasSuffix(p, " ") && p != got[len(got)-1] {
			t.Errorf("part %q is cut inside a word", p)
		}
	}
	if e.count("send") != len(want) {
		t.Errorf("%d sends, want %d (one per part)", e.count("send"), len(want))
	}
}

// A notify that comes while a turn runs shows its message and leaves the
// turn's typing alone (no status call of its own); the turn's answer then
// clears it.
func TestNotifyDuringATurnKeepsItsTyping(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	acc := ev(record.EventAccepted, "t1")
	acc.Phase = record.PhaseQueued
	e.emit(acc)
	e.drain()
	e.notify("Your export is ready.", "export-7")
	e.drain()
	if s := e.lastStatus(); s.Kind != relay.StatusTyping || e.count("status") != 1 {
		t.Fatalf("after the notify: %d status calls, last %+v; want the turn's one typing", e.count("status"), s)
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = "Done."
	e.emit(a)
	e.drain()
	if got := e.texts(); strings.Join(got, "|") != "Your export is ready.|Done." {
		t.Fatalf("chat shows %q, want the notify, then the answer", got)
	}
	if s := e.lastStatus(); s.Kind != relay.StatusClear {
		t.Fatalf("after the answer the status is %+v, want cleared", s)
	}
}

// A relay that dies after the notify's message was sent and its id stored,
// before the cursor moved, re-reads the event after a restart and sends
// nothing again.
func TestNotifyReReadAfterACrashSendsNothing(t *testing.T) {
	e := newEnv(t, relay.Limits{PartLimit: 20})
	e.cfg.Step = func(step string) {
		if step == "advance.before" {
			panic("killed")
		}
	}
	e.restart()
	e.notify("Two parts: this text is longer than twenty.", "k")
	func() {
		defer func() { _ = recover() }()
		e.drain()
	}()
	sent := e.count("send")
	e.cfg.Step = nil
	e.restart()
	e.drain()
	if got := e.texts(); sent < 2 || e.count("send") != sent || strings.Join(got, "") != "Two parts: this text is longer than twenty." {
		t.Fatalf("after a crash before the cursor moved: %d sends (%d before), chat shows %q; want each part sent once",
			e.count("send"), sent, got)
	}
}

// An event of a type the relay does not know is passed over: no message, no
// status, and the chat's next turn shows as usual.
func TestUnknownEventTypeIsPassedOver(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	if err := e.rdb.XAdd(e.ctx, &redis.XAddArgs{Stream: e.replies.Key(e.conv), Values: []any{"type", "future_kind", "task_id", "x1",
		"otid", "", "run_id", "", "message_id", "", "seq", "1", "time", "2026-12-02T06:00:00Z", "data", `{"text":"?"}`}}).Err(); err != nil {
		t.Fatal(err)
	}
	e.drain()
	if len(e.texts()) != 0 || len(e.plat.Calls()) != 0 {
		t.Fatalf("an unknown event made calls: %+v", e.plat.Calls())
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = "Hi"
	e.emit(a)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "Hi" {
		t.Fatalf("chat shows %q, want the answer", got)
	}
}

// /stop stops turns, not a notify: one still waiting to be shown (the
// platform asked to wait) is not cancelled, and the chat has nothing running.
func TestStopLeavesANotifyAlone(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	e.plat.RateLimitNext("send", 30*time.Second)
	e.notify("Backup finished.", "backup-1")
	e.drain()
	if len(e.texts()) != 0 {
		t.Fatalf("chat shows %q before the wait ended", e.texts())
	}
	_, err := e.r.Command(e.ctx, e.conv, "/stop", "u1")
	if !errors.Is(err, queue.ErrNotFound) || len(e.ctl.cancels) != 0 {
		t.Fatalf("/stop with only a notify pending: %v, cancels %+v; want nothing running and no cancel", err, e.ctl.cancels)
	}
	e.clock.Add(30 * time.Second)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "Backup finished." {
		t.Fatalf("after the wait the chat shows %q", got)
	}
}
