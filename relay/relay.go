package relay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"crypto/sha256"
	"encoding/hex"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
	"github.com/lettaq/lettaq/relay/internal/store"
)

// Controller is what the relay asks of lettaq for the chat's commands and
// buttons; *queue.Client implements it.
type Controller interface {
	Cancel(ctx context.Context, r queue.CancelRequest) (queue.CancelResult, error)
	AnswerApproval(ctx context.Context, r queue.ApprovalReply) (queue.EnqueueResult, error)
}

// Config configures a Relay.
type Config struct {
	Redis redis.UniversalClient
	// Prefix of every key, the workers' (default "lettaq:").
	Prefix string
	// Shards is the workers' layout (zero: one shard): the reply streams
	// are in their chats' shards (queue.RepliesOptions.Shards). On one
	// Redis only: the relay's own keys are under Prefix.
	Shards shard.Layout
	// Adapters by integration name; a chat of an integration without one is
	// skipped (and logged).
	Adapters map[string]Adapter
	// Control answers /stop and approval buttons; nil: they are refused.
	Control Controller
	// AgentID, when set, lets /stop find a chat's turn that this relay has
	// not shown yet (queue.CancelRequest with Chat needs the agent).
	AgentID string
	// EditEvery is the least time between two edits in one chat (default 1s).
	EditEvery time.Duration
	// Batch is how many entries one read takes (default 100).
	Batch int64
	// StateTTL is how long a chat's delivery state outlives its last write
	// (default 7 days).
	StateTTL time.Duration
	// Step, when set, is called at each step of a delivery (see Steps): the
	// kill-point test makes the process die there.
	Step func(step string)
	// Metrics, when set, counts what the relay does.
	Metrics *Metrics
	Logger  *slog.Logger
	Now     func() time.Time
}

// Steps at which Config.Step is called, in the order a turn meets them.
var Steps = []string{
	"status.before", "status.after",
	"send.before", "send.after", "savemsg.after",
	"savepress.after",
	"edit.before", "edit.after",
	"delete.before", "delete.after",
	"advance.before", "advance.after",
}

// Relay applies reply events to chats. It is safe for concurrent use; each
// chat must be drained by one goroutine at a time (Runner sees to it).
type Relay struct {
	cfg     Config
	st      *store.Store
	replies *queue.Replies
	log     *slog.Logger

	mu    sync.Mutex
	chats map[record.Conversation]*chat
	run   *runner
}

// New returns a Relay.
func New(cfg Config) *Relay {
	if cfg.EditEvery <= 0 {
		cfg.EditEvery = time.Second
	}
	if cfg.Batch <= 0 {
		cfg.Batch = 100
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Step == nil {
		cfg.Step = func(string) {}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Relay{
		cfg:     cfg,
		st:      store.New(cfg.Redis, cfg.Prefix, cfg.StateTTL).WithShards(cfg.Shards),
		replies: queue.NewReplies(cfg.Redis, queue.RepliesOptions{Prefix: cfg.Prefix, Shards: cfg.Shards}),
		log:     cfg.Logger,
		chats:   map[record.Conversation]*chat{},
	}
}

// StatusIdle is how long after a turn's last event the relay keeps its typing
// indicator alive.
const StatusIdle = time.Minute

// Lease fences a Drain's Redis writes: they fail once the lease Key no longer
// holds Token. No message is sent after Until (real time), which the holder
// sets a margin before the lease can expire: a send and the store of its id
// take milliseconds, and a lease that ran out between them would let the next
// holder send the message again. The zero Lease fences nothing.
type Lease struct {
	Key, Token string
	Until      time.Time
}

// errLeaseShort stops a Drain that should not send any more under its lease.
var errLeaseShort = errors.New("relay: lease too short to send")

// errWait is returned by sync when a call must wait (throttle or 429).
var errWait = errors.New("relay: wait")

// Drain applies every event of c's stream past its cursor to the platform.
// It returns when the stream is drained, with the time at which c needs
// another Drain even without new events (a throttled edit, a typing
// refresh, a 429's wait; zero: none), or with an error (the cursor stays at
// the last entry whose effects are all on the platform). fence fences its
// Redis writes (the zero Fence: none).
func (r *Relay) Drain(ctx context.Context, c record.Conversation, l Lease) (time.Time, error) {
	ad := r.cfg.Adapters[c.Integration]
	if ad == nil {
		return time.Time{}, fmt.Errorf("relay: no adapter for integration %q", c.Integration)
	}
	ch, err := r.chat(ctx, c)
	if err != nil {
		return time.Time{}, err
	}
	ch.fence, ch.until = store.Fence{Key: l.Key, Token: l.Token}, l.Until
	for {
		if now := r.cfg.Now(); now.Before(ch.waitTill) {
			return ch.waitTill, nil
		}
		evs, _, err := r.replies.Read(ctx, c, ch.applied, r.cfg.Batch, 0)
		if err != nil {
			return time.Time{}, err
		}
		for _, ev := range evs {
			ch.apply(ev, r.cfg.Now())
			if ch.pendingSince.IsZero() {
				ch.pendingSince = ev.Time
			}
			r.cfg.Metrics.event(c.Integration)
		}
		next, err := r.sync(ctx, ad, ch)
		if err != nil {
			r.drop(c)
			return time.Time{}, err
		}
		if err := r.advance(ctx, ch); err != nil {
			r.drop(c)
			return time.Time{}, err
		}
		if int64(len(evs)) < r.cfg.Batch {
			return next, nil
		}
	}
}

// chat returns c's state in memory, loading it from Redis (and replaying its
// open turns' events) when this process does not hold it.
func (r *Relay) chat(ctx context.Context, c record.Conversation) (*chat, error) {
	r.mu.Lock()
	ch := r.chats[c]
	r.mu.Unlock()
	if ch != nil {
		return ch, nil
	}
	st, err := r.st.Load(ctx, c)
	if err != nil {
		return nil, err
	}
	ch = newChat(c)
	ch.cursor, ch.applied = st.Cursor, st.Cursor
	if ch.applied == "" {
		ch.applied = "0"
	}
	// Rebuild the open turns from their first event up to the cursor, with
	// no platform call: the messages they had are in st.Msgs, and the next
	// sync edits them to what the events say (an edit is idempotent).
	from := ""
	for _, f := range st.Open {
		if from == "" || entryLE(f, from) {
			from = f
		}
	}
	if from != "" && st.Cursor != "" {
		after := entryBefore(from)
	replay:
		for {
			evs, last, err := r.replies.Read(ctx, c, after, r.cfg.Batch, 0)
			if err != nil {
				return nil, err
			}
			for _, ev := range evs {
				if !entryLE(ev.ID, st.Cursor) {
					break replay
				}
				if _, open := st.Open[ev.TaskID]; open {
					ch.apply(ev, r.cfg.Now())
				}
			}
			if int64(len(evs)) < r.cfg.Batch {
				break
			}
			after = last
		}
		ch.applied = st.Cursor
	}
	for task, f := range st.Open {
		t := ch.turns[task]
		if t == nil { // its events were trimmed from the stream
			t = &turn{task: task, from: f, msgs: map[string]string{}, shown: map[string]string{}}
			ch.turns[task] = t
			ch.order = append(ch.order, task)
		}
		t.from = f
		delete(ch.opened, task)
	}
	ch.saved = map[string]map[string]string{}
	for task, slots := range st.Msgs {
		t := ch.turns[task]
		if t == nil {
			ch.saved[task] = slots
			continue
		}
		for s, id := range slots {
			t.msgs[s] = id
		}
	}
	r.mu.Lock()
	r.chats[c] = ch
	r.mu.Unlock()
	return ch, nil
}

// drop forgets c's state in memory: the next Drain loads it from Redis.
func (r *Relay) drop(c record.Conversation) {
	r.mu.Lock()
	delete(r.chats, c)
	r.mu.Unlock()
}

// Release forgets c in memory when it has nothing open (the chat is idle):
// memory is kept only for chats with a turn in flight.
func (r *Relay) Release(c record.Conversation) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if ch := r.chats[c]; ch != nil && len(ch.turns) == 0 {
		delete(r.chats, c)
	}
}

// advance makes the applied position durable once its effects are shown.
func (r *Relay) advance(ctx context.Context, ch *chat) error {
	if ch.applied == ch.cursor && len(ch.opened) == 0 && len(ch.done) == 0 {
		return nil
	}
	if ch.applied == "0" {
		return nil
	}
	r.cfg.Step("advance.before")
	if err := r.st.Advance(ctx, ch.conv, ch.fence, ch.applied, ch.opened, ch.done); err != nil {
		return err
	}
	r.cfg.Step("advance.after")
	ch.cursor = ch.applied
	ch.opened = map[string]string{}
	ch.done = nil
	return nil
}

// sync makes the platform show what the chat's turns say, oldest turn
// first. It returns the time of the next call it had to put off.
func (r *Relay) sync(ctx context.Context, ad Adapter, ch *chat) (time.Time, error) {
	var next time.Time
	later := func(t time.Time) {
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	lim := ad.Limits()
	if lim.PartLimit <= 0 {
		lim.PartLimit = 4096
	}
	if lim.StatusTTL <= 0 {
		lim.StatusTTL = 5 * time.Second
	}
	for _, task := range append([]string(nil), ch.order...) {
		t := ch.turns[task]
		w, err := r.syncTurn(ctx, ad, lim, ch, t)
		if errors.Is(err, errWait) {
			later(w)
			continue
		}
		if err != nil {
			return time.Time{}, err
		}
		if !w.IsZero() {
			later(w)
		}
	}
	return next, nil
}

// syncTurn brings one turn's messages and status up to date. It returns the
// time of its next refresh, or errWait with the time to try again.
func (r *Relay) syncTurn(ctx context.Context, ad Adapter, lim Limits, ch *chat, t *turn) (time.Time, error) {
	now := r.cfg.Now()
	v := t.view(lim.PartLimit)
	if v.silent {
		ch.forget(t.task)
		return time.Time{}, nil
	}
	if t.answers != nil && !t.answered {
		if err := r.unbutton(ctx, ad, ch, t); err != nil {
			return ch.waitTill, err
		}
	}
	pending := false
	for i, p := range v.parts {
		ok, err := r.show(ctx, ad, ch, t, strconv.Itoa(i), Message{Text: p, Growing: !v.over})
		if err != nil {
			return ch.waitTill, err
		}
		pending = pending || !ok
	}
	if v.approve != nil {
		ok, err := r.show(ctx, ad, ch, t, "a", *v.approve)
		if err != nil {
			return ch.waitTill, err
		}
		pending = pending || !ok
		if ok && !t.pressOK {
			if err := r.savePress(ctx, ch.conv, t, *v.approve); err != nil {
				return time.Time{}, err
			}
			r.cfg.Step("savepress.after")
			t.pressOK = true
		}
	}
	if pending {
		return ch.lastEdit.Add(r.cfg.EditEvery), errWait
	}
	if v.over {
		for _, s := range extraSlots(t.msgs, len(v.parts)) {
			if err := r.call(ctx, ch, "delete", func() error { return ad.Delete(ctx, ch.conv, t.msgs[s]) }); err != nil {
				return ch.waitTill, err
			}
			delete(t.msgs, s)
		}
		// Always (but for a turn that never shows one): a process killed
		// after it showed the status may not have recorded that it did. An
		// adapter whose platform clears the status with the next message
		// makes this a no-op.
		if !v.quiet {
			if err := r.call(ctx, ch, "status", func() error { return ad.Status(ctx, ch.conv, Status{Kind: StatusClear}) }); err != nil {
				return ch.waitTill, err
			}
		}
		r.log.Info("relay: turn shown", "chat", ch.conv.String(), "task_id", t.task, "otid", t.otid, "run_id", t.runID)
		ch.forget(t.task)
		return time.Time{}, nil
	}
	// Running: keep the indicator alive, refreshed a fifth of its life before
	// the platform lets it expire, while the turn shows signs of life (a
	// running turn repeats its phase every 4 s): a turn whose final event
	// never comes must not show typing for ever.
	refresh := lim.StatusTTL * 4 / 5
	if now.Sub(t.seen) > StatusIdle {
		return time.Time{}, nil
	}
	if t.status.IsZero() || now.Sub(t.status) >= refresh {
		s := Status{Kind: StatusTyping, Text: "thinking…"}
		if t.tool != "" {
			s = Status{Kind: StatusTool, Text: "🔧 " + t.tool + "…"}
		}
		if err := r.call(ctx, ch, "status", func() error { return ad.Status(ctx, ch.conv, s) }); err != nil {
			return ch.waitTill, err
		}
		t.status = now
	}
	return t.status.Add(refresh), nil
}

// show puts m in the turn's message in slot: a Send (once; its id stored at
// once) when there is none, else an Edit when the text differs from what this
// process last put there, at most one edit per EditEvery per chat. It reports
// false when the edit was put off.
func (r *Relay) show(ctx context.Context, ad Adapter, ch *chat, t *turn, slot string, m Message) (bool, error) {
	id, ok := t.msgs[slot]
	if !ok {
		if !ch.until.IsZero() && time.Now().After(ch.until) {
			return false, errLeaseShort
		}
		var sent string
		err := r.call(ctx, ch, "send", func() error {
			var err error
			sent, err = ad.Send(ctx, ch.conv, m)
			return err
		})
		if err != nil {
			return false, err
		}
		start := r.cfg.Now()
		if err := r.st.SaveMsg(ctx, ch.conv, ch.fence, t.task, slot, sent); err != nil {
			// The message is on the platform and its id is not stored: the
			// one window (docs/relay.md). Forget the chat in memory so that
			// nothing else of the turn happens before a reload.
			return false, fmt.Errorf("relay: store message id of %s: %w", t.task, err)
		}
		r.cfg.Metrics.window(r.cfg.Now().Sub(start))
		r.cfg.Step("savemsg.after")
		t.msgs[slot], t.shown[slot] = sent, m.Text
		return true, nil
	}
	if prev, known := t.shown[slot]; known && prev == m.Text && m.Buttons == nil {
		return true, nil
	}
	if now := r.cfg.Now(); now.Sub(ch.lastEdit) < r.cfg.EditEvery {
		return false, nil
	}
	if err := r.call(ctx, ch, "edit", func() error { return ad.Edit(ctx, ch.conv, id, m) }); err != nil {
		if errors.Is(err, ErrPermanent) {
			r.log.Warn("relay: edit refused for good; left as is", "chat", ch.conv.String(), "task_id", t.task, "otid", t.otid, "run_id", t.runID, "err", err)
		} else {
			return false, err
		}
	}
	ch.lastEdit = r.cfg.Now()
	t.shown[slot] = m.Text
	return true, nil
}

// call makes one platform call between its two steps, counting it; a 429
// sets the chat's wait and returns errWait; a permanent error is logged and
// skipped (nil) except for edits, whose caller decides.
func (r *Relay) call(ctx context.Context, ch *chat, method string, f func() error) error {
	r.cfg.Step(method + ".before")
	err := f()
	r.cfg.Metrics.call(ch.conv.Integration, method, err, ch.pendingSince, r.cfg.Now())
	if err == nil {
		ch.pendingSince = time.Time{}
	}
	var rl *RateLimitedError
	switch {
	case errors.As(err, &rl):
		ch.waitTill = r.cfg.Now().Add(rl.RetryAfter)
		return errWait
	case err != nil && errors.Is(err, ErrPermanent) && method != "edit":
		r.log.Warn("relay: platform refused for good; skipped", "chat", ch.conv.String(), "method", method, "err", err)
		if method == "send" {
			return err // nothing to store: the turn cannot be shown
		}
		return nil
	case err != nil:
		return err
	}
	r.cfg.Step(method + ".after")
	return nil
}

// pressValue is what a button's short key maps to.
type pressValue struct {
	Request string              `json:"request"`
	Chat    record.Conversation `json:"chat"`
	MsgID   string              `json:"msg_id"`
	Text    string              `json:"text"`
}

func pressShort(request string) string {
	h := sha256.Sum256([]byte(request))
	return hex.EncodeToString(h[:12])
}

func (r *Relay) savePress(ctx context.Context, c record.Conversation, t *turn, m Message) error {
	req := approvalRequest(t.final)
	ttl := 7 * 24 * time.Hour
	if a := t.final.Approval; a != nil && !a.ExpiresAt.IsZero() {
		ttl = time.Until(a.ExpiresAt) + 24*time.Hour
	}
	b, _ := json.Marshal(pressValue{Request: req, Chat: c, MsgID: t.msgs["a"], Text: m.Text})
	return r.st.SavePress(ctx, pressShort(req), string(b), ttl)
}
