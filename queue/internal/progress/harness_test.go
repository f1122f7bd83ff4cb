package progress

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/goleak"

	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/internal/testkit"
	"github.com/lettaq/lettaq/queue/record"
)

// The tests speak of events and records as queue's users do.
type (
	ReplyEvent    = record.ReplyEvent
	Conversation  = record.Conversation
	ReplyPhase    = record.ReplyPhase
	ApprovalEvent = record.ApprovalEvent
	TurnRecord    = record.TurnRecord
)

const (
	EventPhase            = record.EventPhase
	EventAnswerDelta      = record.EventAnswerDelta
	EventAnswer           = record.EventAnswer
	PhaseConnecting       = record.PhaseConnecting
	PhaseStreaming        = record.PhaseStreaming
	PhaseThinking         = record.PhaseThinking
	PhaseAwaitingApproval = record.PhaseAwaitingApproval
)

// ignoreMiniredis ignores miniredis's server side of the test's connections.
var ignoreMiniredis = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer"),
	goleak.IgnoreAnyFunction("github.com/alicebob/miniredis/v2/server.(*Server).servePeer.func2"),
}

// Replies is the reply streams' side the tests need of queue's Replies: it
// completes events (validated, timed, their data as JSON), prepares final
// events and reads the streams back.
type Replies struct {
	rdb redis.UniversalClient
	st  *store.Replies
}

type RepliesOptions struct {
	Prefix string
	MaxLen int64
}

func NewReplies(rdb redis.UniversalClient, opts RepliesOptions) *Replies {
	if opts.MaxLen <= 0 {
		opts.MaxLen = 10000
	}
	return &Replies{rdb: rdb, st: store.NewReplies(rdb, store.Keys{Prefix: opts.Prefix}, opts.MaxLen, 7*24*time.Hour, 0)}
}

// complete is Complete as queue's Replies does it, in short.
func (r *Replies) complete(c Conversation, ev ReplyEvent) (_ ReplyEvent, at, data string, err error) {
	if err := c.Validate(); err != nil {
		return ev, "", "", err
	}
	if ev.TaskID == "" {
		return ev, "", "", errors.New("test: an event without a task id")
	}
	ev.Time = time.Now().UTC()
	js, err := ev.DataJSON()
	if err != nil {
		return ev, "", "", err
	}
	return ev, ev.Time.Format(time.RFC3339Nano), string(js), nil
}

func (r *Replies) Key(c Conversation) string        { return r.st.Keys.Replies(c.Integration, c.ChatID) }
func (r *Replies) answeredKey(taskID string) string { return r.st.Keys.Answered(taskID) }

func (r *Replies) Answered(ctx context.Context, taskID string) (bool, error) {
	return r.st.Answered(ctx, taskID)
}

// prepareMany encodes ev with no head to share.
func (r *Replies) prepareMany(c Conversation, ev ReplyEvent, marker string) (*Event, error) {
	pe := &Event{}
	if err := Encode(r.st, r.complete, pe, nil, c, ev, marker); err != nil {
		return nil, err
	}
	return pe, nil
}

// Read returns c's events after the entry id after (at most count; block is
// not waited for: the tests read what is written).
func (r *Replies) Read(ctx context.Context, c Conversation, after string, count int64, _ time.Duration) ([]ReplyEvent, string, error) {
	if after == "0" {
		after = "-"
	} else {
		after = "(" + after
	}
	msgs, err := r.rdb.XRangeN(ctx, r.Key(c), after, "+", count).Result()
	if err != nil {
		return nil, "", err
	}
	var evs []ReplyEvent
	last := ""
	for _, m := range msgs {
		str := func(k string) string { s, _ := m.Values[k].(string); return s }
		ev := ReplyEvent{ID: m.ID, Type: record.EventType(str("type")), TaskID: str("task_id"), Otid: str("otid"),
			RunID: str("run_id"), MessageID: str("message_id")}
		ev.Seq, _ = strconv.ParseInt(str("seq"), 10, 64)
		ev.Time, _ = time.Parse(time.RFC3339Nano, str("time"))
		if err := ev.SetDataJSON([]byte(str("data"))); err != nil {
			return nil, "", err
		}
		evs = append(evs, ev)
		last = m.ID
	}
	return evs, last, nil
}

// newWriter is the writer of r's streams on rdb.
func newWriter(rdb redis.UniversalClient, r *Replies) *Writer {
	return NewWriter(rdb, r.st, r.complete)
}

// gatedWriter is a writer on b whose round trips wait for gate (Redis slow or down) and are
// counted.
func gatedWriter(b testkit.Backend, gate chan struct{}) (*Writer, *Replies, *atomic.Int64) {
	r := NewReplies(b.RDB, RepliesOptions{Prefix: b.Prefix})
	wr := newWriter(b.RDB, r)
	var trips atomic.Int64
	wr.Exec = func(ctx context.Context, ops []store.Op) []error {
		if gate != nil {
			<-gate
		}
		defer trips.Add(1) // counted once written
		return store.Run(ctx, b.RDB, ops)
	}
	return wr, r, &trips
}

// waitTaken returns once the writer took what p queued.
func waitTaken(wr *Writer, p *Queue) {
	for {
		wr.mu.Lock()
		taken := len(p.queue) == 0
		wr.mu.Unlock()
		if taken {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func streamTexts(t *testing.T, r *Replies, c Conversation) []string {
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

// Journal is a turn's record store as the tests of queued saves need it: a
// save is one SET of the record's JSON, refused without a task id.
type Journal struct {
	rdb    redis.UniversalClient
	prefix string
}

type JournalOptions struct{ Prefix string }

func NewJournal(rdb redis.UniversalClient, opts JournalOptions) *Journal {
	return &Journal{rdb: rdb, prefix: opts.Prefix}
}

func (j *Journal) recordKey(taskID string) string { return j.prefix + "journal:" + taskID }

func (j *Journal) saveOp(rec *TurnRecord) (store.Op, error) {
	if rec.TaskID == "" {
		return nil, errors.New("test: journal: a record with no task id")
	}
	js, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	key := j.recordKey(rec.TaskID)
	return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
		return p.Set(ctx, key, js, time.Hour).Err
	}, nil
}

func (j *Journal) Save(ctx context.Context, rec *TurnRecord) error {
	op, err := j.saveOp(rec)
	if err != nil {
		return err
	}
	return store.Run(ctx, j.rdb, []store.Op{op})[0]
}

func (j *Journal) Get(ctx context.Context, taskID string) (*TurnRecord, error) {
	js, err := j.rdb.Get(ctx, j.recordKey(taskID)).Bytes()
	if err != nil {
		return nil, err
	}
	var rec TurnRecord
	if err := json.Unmarshal(js, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}
