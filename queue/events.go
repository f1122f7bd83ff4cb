package queue

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/internal/split"
	"github.com/lettaq/lettaq/queue/internal/attempt"
	"github.com/lettaq/lettaq/queue/internal/codec"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// Reply events: the wire format is specified in docs/reply-events.md (the one copy of it).
// In short: every conversation has one Redis Stream, <prefix>replies:<integration>:<chat_id>,
// capped with XADD MAXLEN ~ (RepliesOptions.MaxLen) and kept RepliesOptions.StreamTTL
// (trimmed by age, XTRIM MINID ~, and expired when idle); each entry has the flat string fields
// type, task_id, otid, run_id, message_id, seq, time and data (compact JSON, the fields of
// record.ReplyEvent); a turn ends with at most one final event (answer, approval_required, or a
// permanent error), guarded by the marker <prefix>answered:<task_id>.

// RepliesOptions configures Replies. Zero values take the defaults.
type RepliesOptions struct {
	// Prefix of every key; default "lettaq:". On Redis Cluster use a hash tag
	// such as "{lettaq}:" so that the keys one script touches share a slot.
	Prefix string
	// MaxLen caps each conversation stream (XADD MAXLEN ~); default 10,000.
	MaxLen int64
	// TTL of the per-turn keys (answered marker, seq counter, emitted
	// marks); default 7 days.
	TTL time.Duration
	// StreamTTL is how long a conversation's stream keeps its events: each
	// write trims the entries older than StreamTTL (XTRIM MINID ~, so whole
	// nodes of up to 100 entries: an event may stay a little longer), and
	// the stream expires StreamTTL after its last event. Default
	// DefaultStreamTTL (the journal's default retention); negative: never
	// (the stream is then only capped by MaxLen).
	StreamTTL time.Duration
	// PartLimits gives, per integration, the part size (in UTF-16 code
	// units, as Telegram counts) used to fill Parts of an answer that has
	// none; integrations not listed use 4096.
	PartLimits map[string]int
	// Now is the clock for event times; default time.Now.
	Now func() time.Time
	// Shards is the deployment's layout (shard.New with the workers'
	// LETTAQ_SHARDS, queue and this Prefix); the zero value is one shard.
	// With more, each chat's stream and each turn's keys are under its
	// shard's prefix (docs/operations.md, Shards), and Prefix is the
	// layout's base prefix. A Worker or Client with shards gives its
	// layout to Replies made without one.
	Shards shard.Layout
}

// Replies writes and reads the reply streams. It is safe for concurrent use,
// and any number of Replies (in any number of processes) may write the same
// streams.
type Replies struct {
	rdb  redis.UniversalClient
	opts RepliesOptions
	st   *store.Replies
}

// NewReplies returns a Replies on rdb: a relay reads the chats' reply
// streams with it; a worker makes its own unless WorkerConfig.Stores.Replies gives
// one (give the same opts to both).
func NewReplies(rdb redis.UniversalClient, opts RepliesOptions) *Replies {
	if opts.Prefix == "" {
		opts.Prefix = "lettaq:"
	}
	if opts.MaxLen <= 0 {
		opts.MaxLen = 10000
	}
	if opts.TTL <= 0 {
		opts.TTL = 7 * 24 * time.Hour
	}
	streamTTL := opts.StreamTTL
	switch {
	case streamTTL == 0:
		opts.StreamTTL = DefaultStreamTTL
		streamTTL = DefaultStreamTTL
	case streamTTL < 0:
		streamTTL = 0 // the script's "never"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Shards.N() > 1 {
		opts.Prefix = opts.Shards.BasePrefix()
	}
	st := store.NewReplies(rdb, store.Keys{Prefix: opts.Prefix, Layout: opts.Shards}, opts.MaxLen, opts.TTL, streamTTL)
	return &Replies{rdb: rdb, opts: opts, st: st}
}

// inLayout returns r under the layout l (a Worker's or Client's): r itself
// when it has it (or both have one shard), else a Replies on r's client
// and options with l. (A layout other than the deployment's is refused
// when it is claimed, before anything is written under it.)
func (r *Replies) inLayout(l shard.Layout) (*Replies, error) {
	have := r.keys().Layout
	if (l.N() <= 1 && have.N() <= 1) || (have.N() > 1 && have.Record() == l.Record()) {
		return r, nil
	}
	opts := r.opts
	opts.Shards = l
	st := *r.st
	st.Keys = store.Keys{Prefix: l.BasePrefix(), Layout: l}
	return &Replies{rdb: r.rdb, opts: opts, st: &st}, nil
}

// Key returns the stream key of c (see the wire format above). It does not
// validate c; Emit and Read do.
func (r *Replies) Key(c record.Conversation) string {
	return r.keys().Replies(c.Integration, c.ChatID)
}

func (r *Replies) keys() store.Keys                 { return r.st.Keys }
func (r *Replies) answeredKey(taskID string) string { return r.keys().Answered(taskID) }
func (r *Replies) acceptedKey(taskID string) string { return r.keys().Accepted(taskID) }

// Emit appends ev to c's stream. It assigns Seq (from the turn's counter,
// atomically with the append) and Time, and returns the event as written.
// Type must be valid and TaskID set; a phase event needs Phase, tool and
// approval_required events need Tool. An answer without Parts gets its text
// split into parts of at most 4096 UTF-16 code units, cut at paragraph,
// line or word boundaries. Final events that must be written once per turn go
// through EmitAnswerOnce instead.
func (r *Replies) Emit(ctx context.Context, c record.Conversation, ev record.ReplyEvent) (record.ReplyEvent, error) {
	ev, _, err := r.emit(ctx, c, ev, "")
	return ev, err
}

// EmitAnswerOnce appends a final event (answer, approval_required or error;
// an empty Type means answer) unless one was already written for
// ev.TaskID: the check, the marker <prefix>answered:<task_id> (kept for
// TTL), the seq increment and the append are one atomic script. It reports
// whether the event was written; a retried or recovered attempt gets false
// and writes nothing.
func (r *Replies) EmitAnswerOnce(ctx context.Context, c record.Conversation, ev record.ReplyEvent) (emitted bool, err error) {
	if ev.Type == "" {
		ev.Type = record.EventAnswer
	}
	if !ev.Type.Final() {
		return false, fmt.Errorf("%w: EmitAnswerOnce needs a final event type, not %q", record.ErrInvalidEvent, ev.Type)
	}
	_, emitted, err = r.emit(ctx, c, ev, r.answeredKey(ev.TaskID))
	return emitted, err
}

// EmitAcceptedOnce appends the accepted event of ev.TaskID's turn unless
// one was already written (marker <prefix>accepted:<task_id>): the client
// writes it at enqueue and the worker at the turn's first attempt, and
// whichever comes first wins.
func (r *Replies) EmitAcceptedOnce(ctx context.Context, c record.Conversation, ev record.ReplyEvent) (emitted bool, err error) {
	ev.Type = record.EventAccepted
	if ev.Phase == "" {
		ev.Phase = record.PhaseQueued
	}
	_, emitted, err = r.emit(ctx, c, ev, r.acceptedKey(ev.TaskID))
	return emitted, err
}

// Answered reports whether the final event of taskID's turn was written.
func (r *Replies) Answered(ctx context.Context, taskID string) (bool, error) {
	ok, err := r.st.Answered(ctx, taskID)
	if err != nil {
		return false, fmt.Errorf("queue: answered %s: %w", taskID, err)
	}
	return ok, nil
}

func (r *Replies) emit(ctx context.Context, c record.Conversation, ev record.ReplyEvent, marker string) (record.ReplyEvent, bool, error) {
	ev, at, data, err := r.complete(c, ev)
	if err != nil {
		return ev, false, err
	}
	written, id, seq, err := r.st.Emit(ctx, r.Key(c), ev.TaskID, marker,
		"type", string(ev.Type), "task_id", ev.TaskID, "otid", ev.Otid, "run_id", ev.RunID, "message_id", ev.MessageID,
		"time", at, "data", data)
	if err != nil {
		return ev, false, fmt.Errorf("queue: emit %s for task %s: %w", ev.Type, ev.TaskID, err)
	}
	if !written {
		return ev, false, nil
	}
	ev.ID, ev.Seq = id, seq
	return ev, true, nil
}

// complete validates ev and completes it (Parts, truncated tool return,
// Time); it returns the entry's time and data fields.
func (r *Replies) complete(c record.Conversation, ev record.ReplyEvent) (_ record.ReplyEvent, at, data string, err error) {
	if err := c.Validate(); err != nil {
		return ev, "", "", err
	}
	if err := validateReplyEvent(ev); err != nil {
		return ev, "", "", err
	}
	if ev.Type == record.EventAnswer && ev.Parts == nil && ev.Text != "" {
		ev.Parts = split.Message(ev.Text, r.opts.PartLimits[c.Integration])
	}
	if ev.Tool != nil {
		t := *ev.Tool
		if len(t.Return) > MaxToolReturnBytes {
			t.Return = codec.CutUTF8(t.Return, MaxToolReturnBytes)
			t.Truncated = true
		}
		ev.Tool = &t
	}
	ev.Time = r.opts.Now().UTC()
	at, data, err = encodeTimeData(&ev)
	return ev, at, data, err
}

// encodeTimeData returns ev's time and data fields, both in one
// allocation. The data is encoded by hand (appendReplyData: the bytes are
// json.Marshal's, TestReplyDataMatchesJSON): json.Marshal's reflection
// was the deepest point of an instant turn's goroutine, whose stack grew
// (a copy of the whole stack) to make room for it.
func encodeTimeData(ev *record.ReplyEvent) (at, data string, err error) {
	var buf [160]byte
	b := buf[:0]
	if n := replyDataSize(ev); n > len(buf)-40 {
		b = make([]byte, 0, n+40)
	}
	b = ev.Time.AppendFormat(b, time.RFC3339Nano)
	n := len(b)
	if d, ok := appendReplyData(b, ev); ok {
		s := string(d)
		return s[:n], s[n:], nil
	}
	js, err := ev.DataJSON()
	if err != nil {
		return "", "", fmt.Errorf("queue: encode reply event: %w", err)
	}
	return string(b), string(js), nil
}

// replyDataSize is about the size of ev's data field (more when strings
// need escaping).
func replyDataSize(ev *record.ReplyEvent) int {
	n := 96 + len(ev.Phase) + len(ev.Text) + len(ev.StopReason) + len(ev.AnsweredBy)
	for _, p := range ev.Parts {
		n += len(p) + 3
	}
	if t := ev.Tool; t != nil {
		n += 96 + len(t.Name) + len(t.CallID) + len(t.Arguments) + len(t.Status) + len(t.Return)
	}
	return n
}

// appendReplyData appends ev's data field as ev.DataJSON()
// writes it; ok is false for an event with an approval (json.Marshal
// encodes those: they are rare).
func appendReplyData(b []byte, ev *record.ReplyEvent) (_ []byte, ok bool) {
	if ev.Approval != nil {
		return b, false
	}
	open := len(b)
	b = append(b, '{')
	b = codec.AppendStringField(b, `,"phase":`, string(ev.Phase))
	b = codec.AppendIntField(b, `,"elapsed_ms":`, ev.Elapsed.Milliseconds())
	if ev.Position != 0 || ev.Type == record.EventAccepted {
		b = strconv.AppendInt(append(b, `,"position":`...), int64(ev.Position), 10)
	}
	if ev.Text != "" || ev.Type == record.EventAnswerDelta || ev.Type == record.EventAnswer || ev.Type == record.EventError {
		b = codec.AppendString(append(b, `,"text":`...), ev.Text)
	}
	if ev.Narration {
		b = append(b, `,"narration":true`...)
	}
	if len(ev.Parts) > 0 || ev.Type == record.EventAnswer {
		b = append(b, `,"parts":[`...)
		for i, p := range ev.Parts {
			if i > 0 {
				b = append(b, ',')
			}
			b = codec.AppendString(b, p)
		}
		b = append(b, ']')
	}
	if ev.Tool != nil {
		b = attempt.AppendToolEventJSON(append(b, `,"tool":`...), ev.Tool)
	}
	b = codec.AppendStringField(b, `,"stop_reason":`, ev.StopReason)
	if ev.Permanent || ev.Type == record.EventError {
		b = strconv.AppendBool(append(b, `,"permanent":`...), ev.Permanent)
	}
	b = codec.AppendStringField(b, `,"answered_by":`, ev.AnsweredBy)
	return codec.CloseObject(b, open), true
}

func validateReplyEvent(ev record.ReplyEvent) error {
	if !ev.Type.Valid() {
		return fmt.Errorf("%w: unknown type %q", record.ErrInvalidEvent, ev.Type)
	}
	if ev.TaskID == "" {
		return fmt.Errorf("%w: %s event has no task id", record.ErrInvalidEvent, ev.Type)
	}
	switch ev.Type {
	case record.EventNotify:
		return fmt.Errorf("%w: a notify event is written by Client.Notify (once per key), not Emit", record.ErrInvalidEvent)
	case record.EventPhase:
		if ev.Phase == "" {
			return fmt.Errorf("%w: phase event has no phase", record.ErrInvalidEvent)
		}
	case record.EventTool, record.EventApprovalRequired:
		if ev.Tool == nil {
			return fmt.Errorf("%w: %s event has no tool", record.ErrInvalidEvent, ev.Type)
		}
	}
	return nil
}

// replyEventFromEntry decodes a stream entry. It is lenient: a field that is
// missing or malformed is left zero, so that one bad entry (or one written by
// a newer version) never stops a consumer.
func replyEventFromEntry(m redis.XMessage) record.ReplyEvent {
	str := func(k string) string {
		s, _ := m.Values[k].(string)
		return s
	}
	ev := record.ReplyEvent{
		ID:        m.ID,
		Type:      record.EventType(str("type")),
		TaskID:    str("task_id"),
		Otid:      str("otid"),
		RunID:     str("run_id"),
		MessageID: str("message_id"),
	}
	ev.Seq, _ = strconv.ParseInt(str("seq"), 10, 64)
	ev.Time, _ = time.Parse(time.RFC3339Nano, str("time"))
	_ = ev.SetDataJSON([]byte(str("data"))) // lenient: an unreadable data field leaves them zero
	return ev
}

// Read returns up to count events (count <= 0: no limit) of c's stream that
// come after the entry id after, waiting up to block for the first one when
// there is none yet (block <= 0: do not wait).
//
// after is "0" (or "") for the whole retained history, "$" for only events
// written after Read was called, or the id of the last entry already seen.
// lastID is the id to pass as after next time: the id of the last event
// returned, or, when none was, after itself ("$" resolved to the stream's
// current last id, so that looping on lastID never misses an event).
// A wait that ends with no event is not an error.
func (r *Replies) Read(ctx context.Context, c record.Conversation, after string, count int64, block time.Duration) (events []record.ReplyEvent, lastID string, err error) {
	if err := c.Validate(); err != nil {
		return nil, after, err
	}
	msgs, after, err := r.st.Read(ctx, r.Key(c), after, count, block)
	if err != nil {
		return nil, after, err
	}
	lastID = after
	for _, m := range msgs {
		events = append(events, replyEventFromEntry(m))
		lastID = m.ID
	}
	return events, lastID, nil
}

// repliesView is the reply streams as an attempt writes them
// (attempt.ReplyWriter).
type repliesView struct{ *Replies }

func (r repliesView) AnsweredKey(taskID string) string { return r.answeredKey(taskID) }
