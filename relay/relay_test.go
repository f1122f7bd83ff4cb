package relay_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/testredis"
	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/relay"
	"github.com/lettaq/lettaq/relay/fakeplatform"
)

// clock is a test clock that moves only when told.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// control records the relay's Cancel and AnswerApproval calls; a second
// answer with the same message id is a duplicate, as queue's is.
type control struct {
	mu       sync.Mutex
	cancels  []queue.CancelRequest
	answers  []queue.ApprovalReply
	answered map[string]bool
}

func (c *control) Cancel(_ context.Context, r queue.CancelRequest) (queue.CancelResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancels = append(c.cancels, r)
	return queue.CancelResult{}, nil
}

func (c *control) AnswerApproval(_ context.Context, r queue.ApprovalReply) (queue.EnqueueResult, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.answers = append(c.answers, r)
	if c.answered == nil {
		c.answered = map[string]bool{}
	}
	dup := c.answered[r.MessageID]
	c.answered[r.MessageID] = true
	return queue.EnqueueResult{TaskID: "answer-of-" + r.Request, Duplicate: dup}, nil
}

// env is one relay over one chat, with a worker's Replies writing its stream.
type env struct {
	t       *testing.T
	ctx     context.Context
	rdb     *redis.Client
	prefix  string
	conv    record.Conversation
	replies *queue.Replies
	plat    *fakeplatform.Platform
	clock   *clock
	ctl     *control
	cfg     relay.Config
	r       *relay.Relay
}

func newEnv(t *testing.T, lim relay.Limits) *env {
	t.Helper()
	srv := testredis.New(t)
	rdb := srv.Client(t)
	prefix := fmt.Sprintf("relaytest%d:", rand.Int64())
	e := &env{
		t: t, ctx: context.Background(), rdb: rdb, prefix: prefix,
		conv:    record.Conversation{Integration: "fake", ChatID: "c1"},
		replies: queue.NewReplies(rdb, queue.RepliesOptions{Prefix: prefix}),
		plat:    fakeplatform.New(lim),
		clock:   &clock{t: time.Date(2026, 12, 2, 6, 0, 0, 0, time.UTC)},
		ctl:     &control{},
	}
	e.cfg = relay.Config{Redis: rdb, Prefix: prefix, Adapters: map[string]relay.Adapter{"fake": e.plat},
		Control: e.ctl, Now: e.clock.Now, Logger: slog.New(slog.DiscardHandler)}
	e.r = relay.New(e.cfg)
	return e
}

// restart replaces the relay by a new one (a new process: nothing in memory).
func (e *env) restart() { e.r = relay.New(e.cfg) }

func (e *env) emit(ev record.ReplyEvent) {
	e.t.Helper()
	if ev.Type.Final() {
		if _, err := e.replies.EmitAnswerOnce(e.ctx, e.conv, ev); err != nil {
			e.t.Fatal(err)
		}
		return
	}
	if _, err := e.replies.Emit(e.ctx, e.conv, ev); err != nil {
		e.t.Fatal(err)
	}
}

func (e *env) drain() time.Time {
	e.t.Helper()
	next, err := e.r.Drain(e.ctx, e.conv, relay.Lease{})
	if err != nil {
		e.t.Fatal(err)
	}
	return next
}

func (e *env) texts() []string {
	var out []string
	for _, m := range e.plat.Messages(e.conv) {
		out = append(out, m.Text)
	}
	return out
}

func (e *env) count(method string) int {
	n := 0
	for _, c := range e.plat.Calls() {
		if c.Method == method && c.Status == 200 {
			n++
		}
	}
	return n
}

func (e *env) lastStatus() relay.Status {
	var s relay.Status
	for _, c := range e.plat.Calls() {
		if c.Method == "status" {
			s = relay.Status{Kind: c.Kind, Text: c.Text}
		}
	}
	return s
}

func ev(typ record.EventType, task string) record.ReplyEvent {
	return record.ReplyEvent{Type: typ, TaskID: task, Otid: "otid-" + task}
}

func TestQuickAnswerIsOneMessageAfterTyping(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	acc := ev(record.EventAccepted, "t1")
	acc.Phase = record.PhaseQueued
	e.emit(acc)
	e.drain()
	if s := e.lastStatus(); s.Kind != relay.StatusTyping {
		t.Fatalf("while the turn runs the chat shows %+v, want typing", s)
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = "Hello!"
	e.emit(a)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "Hello!" {
		t.Fatalf("chat shows %q, want one message \"Hello!\"", got)
	}
	if e.count("send") != 1 || e.count("edit") != 0 {
		t.Fatalf("sends %d edits %d, want 1 and 0", e.count("send"), e.count("edit"))
	}
	if s := e.lastStatus(); s.Kind != relay.StatusClear {
		t.Fatalf("after the answer the status is %+v, want cleared", s)
	}
}

func TestStreamedAnswerGrowsByThrottledEdits(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	var want strings.Builder
	for i := range 30 {
		d := ev(record.EventAnswerDelta, "t1")
		d.Text = fmt.Sprintf("word%d ", i)
		want.WriteString(d.Text)
		e.emit(d)
		e.drain()
		e.clock.Add(100 * time.Millisecond) // ten deltas a second
	}
	// 3 s of deltas: one send, then at most one edit a second.
	if e.count("send") != 1 {
		t.Fatalf("%d sends, want 1", e.count("send"))
	}
	if n := e.count("edit"); n > 3 {
		t.Fatalf("%d edits in 3 s, want at most 3 (one a second)", n)
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = want.String()
	e.emit(a)
	// The final edit may wait for the throttle: come back when asked.
	for next := e.drain(); !next.IsZero(); next = e.drain() {
		e.clock.Add(next.Sub(e.clock.Now()))
	}
	if got := e.texts(); len(got) != 1 || got[0] != a.Text {
		t.Fatalf("chat shows %q, want the whole answer in one message", got)
	}
}

func TestEditsAtMostOneASecondPerChat(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	for i := range 50 {
		d := ev(record.EventAnswerDelta, "t1")
		d.Text = fmt.Sprintf("w%d ", i)
		e.emit(d)
		e.drain()
		e.clock.Add(50 * time.Millisecond)
	}
	// 50 deltas over 2.5 s of the relay's clock allow at most 3 edits.
	if n := e.count("edit"); n < 1 || n > 3 {
		t.Fatalf("%d edits over 2.5 s of deltas, want 1 to 3", n)
	}
}

func TestLongAnswerIsOneMessagePerPart(t *testing.T) {
	e := newEnv(t, relay.Limits{PartLimit: 20})
	text := strings.Repeat("abcdefghij", 7) // 70 units: 4 parts of ≤ 20
	for i := 0; i < len(text); i += 7 {
		d := ev(record.EventAnswerDelta, "t1")
		d.Text = text[i:min(i+7, len(text))]
		e.emit(d)
		e.drain()
		e.clock.Add(time.Second)
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = text
	a.Parts = []string{text[:15], text[15:35], text[35:55], text[55:]}
	e.emit(a)
	for range 5 {
		e.drain()
		e.clock.Add(time.Second)
	}
	if got := e.texts(); strings.Join(got, "|") != strings.Join(a.Parts, "|") {
		t.Fatalf("chat shows %q, want the parts %q", got, a.Parts)
	}
	if e.count("send") != 4 {
		t.Fatalf("%d sends, want 4 (one per part)", e.count("send"))
	}
}

func TestToolUseIsAStatusLine(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	tl := ev(record.EventTool, "t1")
	tl.Tool = &record.ToolEvent{Name: "web_search", Status: "call"}
	e.emit(tl)
	e.drain()
	if s := e.lastStatus(); s.Kind != relay.StatusTool || !strings.Contains(s.Text, "web_search") {
		t.Fatalf("status %+v, want a tool line naming web_search", s)
	}
	if len(e.texts()) != 0 {
		t.Fatalf("a tool call made a message: %q", e.texts())
	}
}

func TestTypingRefreshedBeforeThePlatformForgetsIt(t *testing.T) {
	e := newEnv(t, relay.Limits{StatusTTL: 5 * time.Second})
	e.emit(ev(record.EventAccepted, "t1"))
	next := e.drain()
	if next.IsZero() || next.Sub(e.clock.Now()) >= 5*time.Second {
		t.Fatalf("next refresh at %v from now, want before the 5 s expiry", next.Sub(e.clock.Now()))
	}
	e.clock.Add(next.Sub(e.clock.Now()))
	e.drain() // no new event
	if n := e.count("status"); n != 2 {
		t.Fatalf("%d status calls, want 2 (shown, refreshed)", n)
	}
}

func TestErrorInPlainWords(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	er := ev(record.EventError, "t1")
	er.Text, er.Permanent = "the agent was not found", true
	e.emit(er)
	e.drain()
	if got := e.texts(); len(got) != 1 || !strings.Contains(got[0], "could not answer: the agent was not found") {
		t.Fatalf("chat shows %q", got)
	}
}

func TestNonPermanentErrorShowsNothing(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	er := ev(record.EventError, "t1")
	er.Text = "stream cut, retrying"
	e.emit(er)
	e.drain()
	if got := e.texts(); len(got) != 0 {
		t.Fatalf("a retried attempt's error was shown: %q", got)
	}
}

func TestCancelledTurnShowsWhatWasSaidAndStopped(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	d := ev(record.EventAnswerDelta, "t1")
	d.Text = "Let me think"
	e.emit(d)
	e.drain()
	e.clock.Add(2 * time.Second)
	er := ev(record.EventError, "t1")
	er.Text, er.Permanent, er.StopReason = "Let me think", true, "cancelled"
	e.emit(er)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "Let me think\n\n⏹ Stopped." {
		t.Fatalf("chat shows %q", got)
	}
}

func TestStopCancelsTheRunningTurn(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	e.emit(ev(record.EventAccepted, "t1"))
	e.drain()
	if _, err := e.r.Command(e.ctx, e.conv, "/stop", "u1"); err != nil {
		t.Fatal(err)
	}
	if len(e.ctl.cancels) != 1 || e.ctl.cancels[0].TaskID != "t1" {
		t.Fatalf("cancels %+v, want one of task t1", e.ctl.cancels)
	}
	if _, err := e.r.Command(e.ctx, e.conv, "hello", "u1"); err != relay.ErrNotCommand {
		t.Fatalf("a plain message: %v, want ErrNotCommand", err)
	}
}

func TestApprovalIsButtonsAndADoublePressOneAnswer(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	ap := ev(record.EventApprovalRequired, "t1")
	ap.Tool = &record.ToolEvent{Name: "delete_file", Arguments: `{"path":"/x"}`}
	ap.Approval = &record.ApprovalEvent{RequestTaskID: "t1", Calls: []record.ToolEvent{*ap.Tool}, ExpiresAt: time.Now().Add(time.Hour)}
	e.emit(ap)
	e.drain()
	msgs := e.plat.Messages(e.conv)
	if len(msgs) != 1 || len(msgs[0].Buttons) != 2 || msgs[0].Buttons[0].Label != "Approve" || msgs[0].Buttons[1].Label != "Deny" {
		t.Fatalf("chat shows %+v, want one message with Approve and Deny", msgs)
	}
	if !strings.Contains(msgs[0].Text, "delete_file") {
		t.Fatalf("request %q does not name the tool", msgs[0].Text)
	}
	for range 2 {
		if _, err := e.r.Press(e.ctx, e.conv, msgs[0].Buttons[0].Data, "u1"); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.ctl.answers) != 2 || e.ctl.answers[0].MessageID != "answer:t1" || e.ctl.answers[1].MessageID != "answer:t1" || !e.ctl.answers[0].Approve {
		t.Fatalf("answers %+v, want both presses as message answer:t1 (one answer)", e.ctl.answers)
	}
	msgs = e.plat.Messages(e.conv)
	if len(msgs[0].Buttons) != 0 || !strings.Contains(msgs[0].Text, "Approved") {
		t.Fatalf("after the press the request shows %+v, want no buttons and Approved", msgs[0])
	}
}

func TestRateLimitedEditWaitsAndIsMadeLater(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	d := ev(record.EventAnswerDelta, "t1")
	d.Text = "one "
	e.emit(d)
	e.drain()
	e.clock.Add(2 * time.Second)
	e.plat.RateLimitNext("edit", 3*time.Second)
	d.Text = "two"
	e.emit(d)
	next := e.drain()
	if got := next.Sub(e.clock.Now()); got != 3*time.Second {
		t.Fatalf("after a 429 the relay comes back in %v, want the 3s asked", got)
	}
	e.clock.Add(3 * time.Second)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "one two" {
		t.Fatalf("chat shows %q, want \"one two\"", got)
	}
}

func TestCoalescedMessageShowsOnlyTheAnsweringTurn(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	a := ev(record.EventAnswer, "t1")
	a.Text, a.AnsweredBy = "both answered", "t2"
	e.emit(a)
	b := ev(record.EventAnswer, "t2")
	b.Text = "both answered"
	e.emit(b)
	e.drain()
	if got := e.texts(); len(got) != 1 {
		t.Fatalf("chat shows %q, want one message", got)
	}
}

func TestRestartMidStreamEditsTheSameMessage(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	d := ev(record.EventAnswerDelta, "t1")
	d.Text = "first half, "
	e.emit(d)
	e.drain()
	e.restart()
	e.clock.Add(2 * time.Second)
	d.Text = "second half"
	e.emit(d)
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != "first half, second half" {
		t.Fatalf("after a restart the chat shows %q, want one message with both halves", got)
	}
	a := ev(record.EventAnswer, "t1")
	a.Text = "first half, second half"
	e.emit(a)
	e.restart()
	e.clock.Add(2 * time.Second)
	e.drain()
	e.restart()
	e.drain()
	if got := e.texts(); len(got) != 1 || got[0] != a.Text || e.count("send") != 1 {
		t.Fatalf("chat shows %q after %d sends, want one message", got, e.count("send"))
	}
}

func TestRestartBeforeTheCursorMovedKeepsTheMessage(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	e.cfg.Step = func(step string) {
		if step == "advance.before" {
			panic("killed")
		}
	}
	e.restart()
	a := ev(record.EventAnswer, "t1")
	a.Text = "Hello"
	e.emit(a)
	func() {
		defer func() { _ = recover() }()
		e.drain()
	}()
	e.cfg.Step = nil
	e.restart()
	e.drain()
	if got := e.texts(); len(got) != 1 || e.count("send") != 1 {
		t.Fatalf("after a crash before the cursor moved: %d sends, chat shows %q; want one message", e.count("send"), got)
	}
}

func TestMetricsCountEventsCallsAndRateLimits(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	reg := prometheus.NewRegistry()
	e.cfg.Metrics = relay.NewMetrics(reg)
	e.restart()
	d := ev(record.EventAnswerDelta, "t1")
	d.Text = "hi "
	e.emit(d)
	e.drain()
	e.clock.Add(2 * time.Second)
	e.plat.RateLimitNext("edit", time.Second)
	d.Text = "there"
	e.emit(d)
	e.drain()
	sums := map[string]float64{}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			key := mf.GetName()
			for _, l := range m.GetLabel() {
				key += "," + l.GetName() + "=" + l.GetValue()
			}
			sums[key] += m.GetCounter().GetValue() + float64(m.GetHistogram().GetSampleCount())
		}
	}
	for key, want := range map[string]float64{
		"lettaq_relay_events_total,integration=fake":                                         2,
		"lettaq_relay_platform_calls_total,integration=fake,method=send,status=ok":           1,
		"lettaq_relay_platform_calls_total,integration=fake,method=edit,status=rate_limited": 1,
		"lettaq_relay_rate_limited_total,integration=fake":                                   1,
		"lettaq_relay_unsaved_window_seconds":                                                1,
	} {
		if sums[key] != want {
			t.Errorf("%s = %v, want %v (all: %v)", key, sums[key], want, sums)
		}
	}
	if sums["lettaq_relay_lag_seconds"] < 1 {
		t.Errorf("no lag observed: %v", sums)
	}
}

func TestTypingStopsWhenTheTurnFallsSilent(t *testing.T) {
	e := newEnv(t, relay.Limits{StatusTTL: 5 * time.Second})
	e.emit(ev(record.EventAccepted, "t1"))
	next := e.drain()
	for i := 0; !next.IsZero() && i < 100; i++ {
		e.clock.Add(next.Sub(e.clock.Now()))
		next = e.drain()
	}
	if !next.IsZero() {
		t.Fatal("typing is refreshed for ever for a turn with no event")
	}
	if n := e.count("status"); n < 10 || n > 20 {
		t.Fatalf("%d typing refreshes, want one every 4 s for a minute", n)
	}
}

func TestExpiredApprovalLosesItsButtons(t *testing.T) {
	e := newEnv(t, relay.Limits{})
	ap := ev(record.EventApprovalRequired, "t1")
	ap.Tool = &record.ToolEvent{Name: "rm"}
	ap.Approval = &record.ApprovalEvent{RequestTaskID: "t1", Calls: []record.ToolEvent{{Name: "rm"}}, ExpiresAt: time.Now().Add(time.Hour)}
	e.emit(ap)
	e.drain()
	acc := ev(record.EventAccepted, "answer-t1")
	acc.Approval = &record.ApprovalEvent{RequestTaskID: "t1", Decision: "denied", Cause: record.AnswerExpired}
	e.emit(acc)
	e.drain()
	msgs := e.plat.Messages(e.conv)
	if len(msgs) != 1 || len(msgs[0].Buttons) != 0 || !strings.Contains(msgs[0].Text, "Expired") {
		t.Fatalf("after the expiry the request shows %+v, want no buttons and Expired", msgs)
	}
}
