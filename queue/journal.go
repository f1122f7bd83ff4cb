package queue

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lettaq/lettaq/queue/internal/journal"
	"github.com/lettaq/lettaq/queue/internal/store"
	"github.com/lettaq/lettaq/queue/record"
	"github.com/lettaq/lettaq/queue/shard"
)

// The turn journal: key layout.
//
// With the default prefix "lettaq:" (all keys expire after Retention, which
// every write of them refreshes; a turn writes its otid key and an index
// entry with the first save that needs them, not again: see journal.Indexed):
//
//	lettaq:journal:turn:<task_id>     STRING  the record.TurnRecord as one JSON value (SET … PX)
//	lettaq:journal:intents:<task_id>  LIST    one JSON record.Intent per attempt that meant to
//	                                          send, oldest first (appended once each, by
//	                                          store.IntentPush; never rewritten)
//	lettaq:journal:otid:<otid>        STRING  the task id of the turn with that otid
//	lettaq:journal:runners:<task_id>  HASH    next: the number of the turn's newest runner
//	                                          (HINCRBY at its start); saved: the highest
//	                                          number whose save wrote the record (see journal.Saver.SaveOp)
//	lettaq:journal:idx:recent         ZSET    every turn: member task id, score = turn
//	                                          time in Unix ms (EnqueuedAt, else first start,
//	                                          else time of first save)
//	lettaq:journal:idx:stalls         ZSET    turns with an attempt whose TimeoutClock != ""
//	lettaq:journal:idx:retries        ZSET    turns with more than one attempt
//	lettaq:journal:idx:resends        ZSET    turns with Resends > 0
//	lettaq:journal:idx:failures       ZSET    turns whose Outcome is "failed"
//
// Each index keeps the newest MaxIndex members. An index member whose record
// has expired is skipped by queries and removed then. On Redis Cluster use a
// prefix with a hash tag (e.g. "{lettaq}:") so one save touches one slot.
// With N shards (JournalOptions.Shards) every key above is under the
// turn's shard's prefix, each shard with its own indexes (Recent merges
// them), and a look-up by otid reads the N shards.

// Filter selects the turns Recent returns.
type Filter string

// The filters; each but FilterAll has its own index.
const (
	FilterAll      Filter = "all"
	FilterStalls   Filter = "stalls"
	FilterRetries  Filter = "retries"
	FilterResends  Filter = "resends"
	FilterFailures Filter = "failures"
)

// UnmarshalText reads a filter name ("" means all): for a filter given as
// text (a flag, a query parameter).
func (f *Filter) UnmarshalText(b []byte) error {
	switch v := Filter(b); v {
	case "":
		*f = FilterAll
	case FilterAll, FilterStalls, FilterRetries, FilterResends, FilterFailures:
		*f = v
	default:
		return fmt.Errorf("queue: unknown journal filter %q (want all, stalls, retries, resends or failures)", b)
	}
	return nil
}

// Match reports whether rec belongs in f; Journal.Recent keeps the records
// that match.
func (f Filter) Match(rec *record.TurnRecord) bool {
	i, ok := f.index()
	return ok && i.Match(rec)
}

// index is f's index in the journal.
func (f Filter) index() (journal.Index, bool) {
	switch f {
	case FilterAll, "":
		return journal.IndexRecent, true
	case FilterStalls:
		return journal.IndexStalls, true
	case FilterRetries:
		return journal.IndexRetries, true
	case FilterResends:
		return journal.IndexResends, true
	case FilterFailures:
		return journal.IndexFailures, true
	}
	return 0, false
}

// JournalOptions configures a Journal. Zero values take the defaults.
type JournalOptions struct {
	// Prefix of every key; default "lettaq:".
	Prefix string
	// Retention of records, intents and indexes, refreshed on every write;
	// default 7 days.
	Retention time.Duration
	// MaxIndex is how many entries each index keeps; default 100,000.
	MaxIndex int64
	// Now is the clock for intents and UpdatedAt; default time.Now.
	Now func() time.Time
	// LookupTimeout bounds Lookup's search for the turns an id's beginning
	// names; default 3s.
	LookupTimeout time.Duration
	// Shards is the deployment's layout (see RepliesOptions.Shards): with
	// more than one shard each turn's record, intents, runners, otid key
	// and index entries are under its shard's prefix (this Prefix without
	// its braces, then the shard's tag), and Recent merges the shards'
	// indexes. Zero: one shard. A Worker with shards gives its layout to a
	// Journal made without one.
	Shards shard.Layout
}

// defaultLookupTimeout is JournalOptions.LookupTimeout's default.
const defaultLookupTimeout = 3 * time.Second

// Journal stores a record of every turn and every attempt, for operators.
// It is safe for concurrent use.
type Journal struct {
	rdb   redis.UniversalClient
	opts  JournalOptions
	st    *store.Journal
	saver *journal.Saver
}

// NewJournal returns a Journal on rdb: an operator's tool or a producer reads
// turns' records with it; a worker makes its own unless WorkerConfig.Stores.Journal
// gives one (give the same opts to both).
func NewJournal(rdb redis.UniversalClient, opts JournalOptions) *Journal {
	if opts.Prefix == "" {
		opts.Prefix = "lettaq:"
	}
	if opts.Retention <= 0 {
		opts.Retention = 7 * 24 * time.Hour
	}
	if opts.MaxIndex <= 0 {
		opts.MaxIndex = 100000
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.LookupTimeout <= 0 {
		opts.LookupTimeout = defaultLookupTimeout
	}
	if opts.Shards.N() > 1 {
		// The journal's own prefix, spread like the replies' (shard.New
		// cannot fail on a layout that was made once).
		opts.Shards, _ = shard.New(opts.Shards.N(), opts.Shards.BaseQueue(), opts.Prefix)
	}
	st := store.NewJournal(rdb, store.Keys{Prefix: opts.Prefix, Layout: opts.Shards}, opts.Retention, opts.MaxIndex, journal.IndexNames())
	return &Journal{rdb: rdb, opts: opts, st: st, saver: journal.NewSaver(st, opts.Now)}
}

// journalIndexName is the name of f's index in the store ("recent": all).
func journalIndexName(f Filter) string {
	i, _ := f.index()
	return i.Name()
}

// RecordIntent records, before the send, that attempt (by worker) is about
// to send taskID's message with otid, and returns the intents recorded
// before it, oldest first, in one round trip (see intentOpOf): of two racing
// attempts exactly one sees the other's intent. An attempt
// that gets a non-empty prior must look for the otid in the agent's history
// before it may send. (Durability across a Redis crash is Redis's: run it
// with appendonly yes if intents must survive one.)
func (j *Journal) RecordIntent(ctx context.Context, taskID, otid string, attempt int, worker string) (prior []record.Intent, err error) {
	if taskID == "" || otid == "" {
		return nil, fmt.Errorf("queue: record intent: task id and otid are required (task %q, otid %q)", taskID, otid)
	}
	b, err := journal.MarshalIntent(&record.Intent{TaskID: taskID, Otid: otid, Attempt: attempt, Worker: worker, At: j.opts.Now().UTC()})
	if err != nil {
		return nil, fmt.Errorf("queue: record intent: %w", err)
	}
	if err := store.Run(ctx, j.rdb, []store.Op{j.intentOpOf(taskID, b, &prior)})[0]; err != nil {
		return nil, err
	}
	return prior, nil
}

// intentOp is RecordIntent as a pipeline op: prior gets the intents
// recorded before this one.
func (j *Journal) intentOp(taskID, otid string, attempt int, worker string, prior *[]record.Intent) (store.Op, error) {
	if taskID == "" || otid == "" {
		return nil, fmt.Errorf("queue: record intent: task id and otid are required (task %q, otid %q)", taskID, otid)
	}
	b, err := journal.MarshalIntent(&record.Intent{TaskID: taskID, Otid: otid, Attempt: attempt, Worker: worker, At: j.opts.Now().UTC()})
	if err != nil {
		return nil, fmt.Errorf("queue: record intent: %w", err)
	}
	return j.intentOpOf(taskID, b, prior), nil
}

// intentOpOf appends taskID's intent b (store.Journal.IntentOp): prior
// gets the intents recorded before it.
func (j *Journal) intentOpOf(taskID string, b []byte, prior *[]record.Intent) store.Op {
	return j.st.IntentOp(taskID, b, func(raw []string) (err error) {
		*prior, err = journal.DecodeIntents(taskID, raw)
		return err
	})
}

// RecordRefusal withdraws attempt's latest intent: its send was refused by
// the server before anything was stored (see record.Intent). Only a definitive
// refusal may be recorded: a later attempt then sends without first
// looking for the otid.
func (j *Journal) RecordRefusal(ctx context.Context, taskID, otid string, attempt int, worker string) error {
	b, err := journal.MarshalIntent(&record.Intent{TaskID: taskID, Otid: otid, Attempt: attempt, Worker: worker, At: j.opts.Now().UTC(), Refused: true})
	if err != nil {
		return fmt.Errorf("queue: record refusal: %w", err)
	}
	if err := j.st.AppendIntent(ctx, taskID, b); err != nil {
		return fmt.Errorf("queue: record refusal for task %s: %w", taskID, err)
	}
	return nil
}

// Intents returns the intents recorded for taskID, oldest first.
func (j *Journal) Intents(ctx context.Context, taskID string) ([]record.Intent, error) {
	raw, err := j.st.Intents(ctx, taskID)
	if err != nil {
		return nil, fmt.Errorf("queue: intents of task %s: %w", taskID, err)
	}
	return journal.DecodeIntents(taskID, raw)
}

// Save writes rec (replacing any earlier version: last write wins), refreshes
// its retention and updates the indexes, in one round trip.
// rec is not modified; the stored copy gets UpdatedAt, and QueueWait and
// Latency when they are zero and can be computed.
func (j *Journal) Save(ctx context.Context, rec *record.TurnRecord) error {
	return j.saveBy(ctx, rec, 0)
}

// save is Save for the runner numbered runner (0: none; see
// journal.Saver.SaveOp).
func (j *Journal) saveBy(ctx context.Context, rec *record.TurnRecord, runner int64) error {
	op, err := j.saver.SaveOp(rec, false, runner, nil)
	if err != nil {
		return err
	}
	return store.Run(ctx, j.rdb, []store.Op{op})[0]
}

// Get returns the record of taskID, or an error wrapping ErrNotFound.
func (j *Journal) Get(ctx context.Context, taskID string) (*record.TurnRecord, error) {
	b, err := j.st.Record(ctx, taskID)
	if errors.Is(err, store.ErrNoRecord) {
		return nil, fmt.Errorf("%w: task %s", ErrNotFound, taskID)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: journal get %s: %w", taskID, err)
	}
	return journal.DecodeRecord(taskID, b)
}

// ByOtid returns the record of the turn with otid, or an error wrapping
// ErrNotFound.
func (j *Journal) ByOtid(ctx context.Context, otid string) (*record.TurnRecord, error) {
	taskID, err := j.st.OtidTask(ctx, otid)
	if errors.Is(err, store.ErrNoRecord) {
		return nil, fmt.Errorf("%w: otid %s", ErrNotFound, otid)
	}
	if err != nil {
		return nil, fmt.Errorf("queue: journal otid %s: %w", otid, err)
	}
	rec, err := j.Get(ctx, taskID)
	if err != nil {
		return nil, err
	}
	if rec.Otid != otid {
		return nil, fmt.Errorf("%w: otid %s (task %s now has otid %q)", ErrNotFound, otid, taskID, rec.Otid)
	}
	return rec, nil
}

// Recent returns up to limit records (limit <= 0: 100) that match filter,
// newest turn first. Index entries whose record has expired are skipped and
// removed from the index.
func (j *Journal) Recent(ctx context.Context, filter Filter, limit int) ([]*record.TurnRecord, error) {
	if filter == "" {
		filter = FilterAll
	}
	if err := new(Filter).UnmarshalText([]byte(filter)); err != nil {
		return nil, err
	}
	if limit <= 0 {
		limit = 100
	}
	index := journalIndexName(filter)
	page := int64(max(limit, 50))
	var (
		out   []*record.TurnRecord
		stale []any
	)
	for start := int64(0); len(out) < limit; start += page {
		ids, err := j.st.IndexPage(ctx, index, start, start+page-1)
		if err != nil {
			return nil, fmt.Errorf("queue: journal recent %s: %w", filter, err)
		}
		if len(ids) == 0 {
			break
		}
		vals, err := j.st.Records(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("queue: journal recent %s: %w", filter, err)
		}
		for i, v := range vals {
			s, ok := v.(string)
			if !ok {
				stale = append(stale, ids[i])
				continue
			}
			rec, err := journal.DecodeRecord(ids[i], []byte(s))
			if err != nil {
				return nil, err
			}
			if !filter.Match(rec) {
				continue
			}
			out = append(out, rec)
			if len(out) == limit {
				break
			}
		}
		if int64(len(ids)) < page {
			break
		}
	}
	if len(stale) > 0 {
		if err := j.st.Unindex(ctx, index, stale...); err != nil {
			return nil, fmt.Errorf("queue: journal recent %s: remove expired: %w", filter, err)
		}
	}
	return out, nil
}

// inLayout returns j under the layout l (a Worker's): j itself when it has
// it (or both have one shard), else a Journal on j's client and options
// with l (see Replies.inLayout).
func (j *Journal) inLayout(l shard.Layout) (*Journal, error) {
	have := j.st.Keys.Layout
	if (l.N() <= 1 && have.N() <= 1) || (have.N() > 1 && have.N() == l.N() && have.BaseQueue() == l.BaseQueue()) {
		return j, nil
	}
	opts := j.opts
	opts.Shards = l
	return NewJournal(j.rdb, opts), nil
}

// journalView is the journal as an attempt writes it (attempt.JournalWriter).
type journalView struct{ *Journal }

func (j journalView) IntentOp(taskID, otid string, attempt int, worker string, prior *[]record.Intent) (store.Op, error) {
	return j.intentOp(taskID, otid, attempt, worker, prior)
}

func (j journalView) SaveBy(ctx context.Context, rec *record.TurnRecord, runner int64) error {
	return j.saveBy(ctx, rec, runner)
}
