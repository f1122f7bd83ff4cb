package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Journal keeps the turn journal: per task its record (the caller's JSON)
// and its list of send intents, per otid its task, and the indexes of the
// records (sorted sets named by the caller's index names, "recent" holding
// every turn). Every key lives Retention, refreshed by the writes; each
// index keeps the newest MaxIndex members.
type Journal struct {
	RDB       redis.UniversalClient
	Keys      Keys
	Retention time.Duration
	MaxIndex  int64
	// What every save passes: the index keys (the order of NewJournal's
	// indexes), and the retention in ms and MaxIndex as script arguments.
	indexKeys     [][]any // by shard, boxed once
	ttlArg, keepN any
}

// ErrNoRecord: the journal has no record (or otid key) by that name.
var ErrNoRecord = errors.New("no journal record")

// NewJournal returns the journal on rdb whose saves update indexes (by
// name, in the order of a save's flags).
func NewJournal(rdb redis.UniversalClient, keys Keys, retention time.Duration, maxIndex int64, indexes []string) *Journal {
	j := &Journal{RDB: rdb, Keys: keys, Retention: retention, MaxIndex: maxIndex,
		ttlArg: retention.Milliseconds(), keepN: maxIndex}
	j.indexKeys = make([][]any, keys.Shards())
	for i := range j.indexKeys {
		for _, name := range indexes {
			j.indexKeys[i] = append(j.indexKeys[i], keys.Journal().IndexIn(i, name))
		}
	}
	return j
}

// Record returns the record of taskID (ErrNoRecord: none).
func (j *Journal) Record(ctx context.Context, taskID string) ([]byte, error) {
	b, err := j.RDB.Get(ctx, j.Keys.Journal().Turn(taskID)).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, ErrNoRecord
	}
	return b, err
}

// OtidTask returns the task id of the turn with otid (ErrNoRecord: none).
func (j *Journal) OtidTask(ctx context.Context, otid string) (string, error) {
	var (
		taskID string
		err    error
	)
	if j.Keys.Sharded() {
		// The otid key is in its turn's shard, which an otid does not
		// name: an operator's look-up or a continuation's, rare enough to
		// read the N shards (one round trip) rather than keep an index.
		taskID, err = probeShards(ctx, j.RDB, j.Keys, func(i int) string { return j.Keys.Journal().OtidIn(i, otid) })
	} else {
		taskID, err = j.RDB.Get(ctx, j.Keys.Journal().Otid(otid)).Result()
	}
	if errors.Is(err, redis.Nil) {
		return "", ErrNoRecord
	}
	return taskID, err
}

// IntentOp appends taskID's intent b and reads the list: the intents
// before b are those ahead of its place, which read gets. Of two racing
// attempts exactly one thus sees the other's intent (IntentPush is atomic,
// and the list only grows: nothing but the retention removes an intent).
// The push is idempotent (see IntentPush): sent again after its reply was
// lost, it finds b in the list and reads the intents ahead of it, not b.
func (j *Journal) IntentOp(taskID string, b []byte, read func(prior []string) error) Op {
	args := IntentPush.Args(1, 2)
	args = append(args, j.Keys.Journal().Intents(taskID), b, j.ttlArg)
	return ScriptOp(IntentPush, args, func(c *redis.Cmd) error {
		raw, err := c.StringSlice()
		if err != nil {
			return fmt.Errorf("queue: record intent for task %s: %w", taskID, err)
		}
		return read(raw)
	})
}

// AppendIntent appends b to taskID's intents (a refusal: nothing read),
// once (IntentPush).
func (j *Journal) AppendIntent(ctx context.Context, taskID string, b []byte) error {
	args := IntentPush.Args(1, 2)
	args = append(args, j.Keys.Journal().Intents(taskID), b, j.ttlArg)
	return IntentPush.Call(ctx, j.RDB, args).Err()
}

// Intents returns the intents recorded for taskID, oldest first.
func (j *Journal) Intents(ctx context.Context, taskID string) ([]string, error) {
	return j.RDB.LRange(ctx, j.Keys.Journal().Intents(taskID), 0, -1).Result()
}

// SaveArgs begins the command of JournalSave that writes record, the
// record of taskID (with otid: its otid key's name; otidArg: the otid to
// write, "" for none) under score (known: the turn's time, else the time
// of its first save), for the runner numbered runner (0: none; see
// StartReads.Runner); the caller appends one flag per index, in the order
// of NewJournal's indexes: "1" add (or move: ZADD), "0" remove, "-" leave
// as it is, then IntentsFlag.
func (j *Journal) SaveArgs(taskID, otid, otidArg string, record []byte, score int64, known, keepFinished bool, runner int64) []any {
	// The record, otid, intents and runners keys: one string, four slices
	// of it (each boxed: an allocation apiece).
	p := j.Keys.TaskPrefix(taskID)
	indexKeys := j.indexKeys[j.Keys.ShardOfTask(taskID)]
	all := p + "journal:turn:" + taskID + p + "journal:otid:" + otid + p + "journal:intents:" + taskID +
		p + "journal:runners:" + taskID
	n1 := len(p) + len("journal:turn:") + len(taskID)
	n2 := n1 + len(p) + len("journal:otid:") + len(otid)
	n3 := n2 + len(p) + len("journal:intents:") + len(taskID)
	nkeys := 4 + len(indexKeys)
	args := JournalSave.Args(nkeys, 10+len(indexKeys))
	args = append(args, all[:n1], all[n1:n2], all[n2:n3], all[n3:])
	args = append(args, indexKeys...)
	args = append(args, record, taskID, otidArg, j.ttlArg, score, boolAny(known), j.keepN, boolAny(keepFinished), runner)
	return args
}

// IntentsFlag is a save's last argument: whether the record may have
// intents, whose expiry the save then refreshes (see JournalSave).
func IntentsFlag(may bool) any { return boolAny(may) }

// boolAny is a flag as a script argument, boxed once.
func boolAny(b bool) any {
	if b {
		return argTrue
	}
	return argFalse
}

var argTrue, argFalse any = "1", "0"

// SaveOp is the save that args (SaveArgs' command and its flags)
// describes, as a pipeline op. With keepFinished it writes nothing over a
// record whose outcome is final, and with a runner's number nothing over a
// record that a runner with a higher number saved (the script reads them
// first). Once the save ran and wrote the index entries, sure (nil: none)
// gets the bits wrote.
func (j *Journal) SaveOp(args []any, taskID string, keepFinished bool, runner int64, sure *atomic.Uint32, wrote uint32) Op {
	if !keepFinished && runner == 0 && j.Single() {
		return j.plainSaveOp(args, taskID, sure, wrote)
	}
	return ScriptOp(JournalSave, args, func(c *redis.Cmd) error {
		if err := c.Err(); err != nil {
			return fmt.Errorf("queue: journal save %s: %w", taskID, err)
		}
		if n, _ := c.Int64(); n == 1 && sure != nil {
			sure.Or(wrote)
		}
		return nil
	})
}

// Single reports whether the journal's client is one Redis (not a Cluster
// or a Ring), where a pipeline may carry a MULTI … EXEC of its own.
func (j *Journal) Single() bool {
	_, ok := j.RDB.(*redis.Client)
	return ok
}

// plainSaveOp is the save that args (SaveArgs' command, without
// keepFinished or a runner's number) describes, as plain commands in a MULTI … EXEC instead of
// a call of JournalSave: Redis's thread spends 25–26 µs on a first
// save this way against 36–38 µs on the script, the round trip included
// (BenchmarkJournalSaveRedisCost; a script's redis.call costs Redis more
// than the command itself, and its arguments are copied into Lua and back). Nothing in it
// depends on what is stored, so it needs no script; the transaction keeps
// it atomic, so that of two racing saves the record and its index entries
// are one save's (TestJournalSaveConcurrent); a save of the record alone
// (SET and the intents' PEXPIRE) goes without one. For one Redis only (Single):
// a Cluster pipeline would send MULTI and EXEC, which have no key, to any
// node.
func (j *Journal) plainSaveOp(args []any, taskID string, sure *atomic.Uint32, wrote uint32) Op {
	return func(ctx context.Context, p redis.Pipeliner, _ bool) func() error {
		nk := args[2].(int)
		keys, a := args[3:3+nk], args[3+nk:]
		// a: record JSON, task id, otid, ttl, score, known, keep, keep
		// finished, runner, then one flag per index key, then the
		// intents flag (see JournalSave).
		ttl := a[3]
		// A save that writes only the record (a turn's later saves: its
		// index entries and otid key are written) needs no transaction.
		tx := a[2] != ""
		for _, f := range a[9 : len(a)-1] {
			tx = tx || f != "-"
		}
		cmds := make([]*redis.Cmd, 0, 5+3*(nk-4))
		add := func(args ...any) {
			c := redis.NewCmd(ctx, args...)
			_ = p.Process(ctx, c) // the error is c's
			cmds = append(cmds, c)
		}
		if tx {
			add("multi")
		}
		add("set", keys[0], a[0], "px", ttl)
		if a[2] != "" {
			add("set", keys[1], a[1], "px", ttl)
		}
		if a[len(a)-1] == "1" {
			add("pexpire", keys[2], ttl)
		}
		for i := 4; i < nk; i++ { // (keys[3], the runners, is the script's)
			switch a[i+5] {
			case "1":
				if a[5] == "1" {
					add("zadd", keys[i], a[4], a[1])
				} else {
					add("zadd", keys[i], "nx", a[4], a[1])
				}
				add("zremrangebyrank", keys[i], 0, -j.MaxIndex-1)
				add("pexpire", keys[i], ttl)
			case "0":
				add("zrem", keys[i], a[1])
			}
		}
		if tx {
			add("exec")
		}
		return func() error {
			for _, c := range cmds {
				if err := c.Err(); err != nil {
					return fmt.Errorf("queue: journal save %s: %w", taskID, err)
				}
			}
			if tx {
				// EXEC's reply holds each command's result: an error
				// among them is that command's (the others ran).
				res, _ := cmds[len(cmds)-1].Val().([]any)
				if len(res) != len(cmds)-2 {
					return fmt.Errorf("queue: journal save %s: the transaction ran %d of %d commands", taskID, len(res), len(cmds)-2)
				}
				for _, r := range res {
					if err, ok := r.(error); ok {
						return fmt.Errorf("queue: journal save %s: %w", taskID, err)
					}
				}
			}
			if sure != nil {
				sure.Or(wrote)
			}
			return nil
		}
	}
}

// IndexPage returns the task ids of index (by name) from rank start to
// stop, newest first.
// With N shards it merges the shards' indexes: the newest stop+1 of each,
// in one pipeline, newest first.
func (j *Journal) IndexPage(ctx context.Context, index string, start, stop int64) ([]string, error) {
	if !j.Keys.Sharded() {
		return j.RDB.ZRevRange(ctx, j.Keys.Journal().Index(index), start, stop).Result()
	}
	n := j.Keys.Shards()
	cmds := make([]*redis.ZSliceCmd, n)
	p := j.RDB.Pipeline()
	for i := range n {
		cmds[i] = p.ZRevRangeWithScores(ctx, j.Keys.Journal().IndexIn(i, index), 0, stop)
	}
	_, _ = p.Exec(ctx) // each command's error is read below
	var all []redis.Z
	for _, c := range cmds {
		zs, err := c.Result()
		if err != nil {
			return nil, err
		}
		all = append(all, zs...)
	}
	slices.SortFunc(all, func(a, b redis.Z) int { // as ZREVRANGE: score, then member, descending
		if c := cmp.Compare(b.Score, a.Score); c != 0 {
			return c
		}
		return cmp.Compare(fmt.Sprint(b.Member), fmt.Sprint(a.Member))
	})
	var out []string
	for k := start; k <= stop && k < int64(len(all)); k++ {
		out = append(out, fmt.Sprint(all[k].Member))
	}
	return out, nil
}

// Unindex removes ids from index (by name): each from its shard's.
func (j *Journal) Unindex(ctx context.Context, index string, ids ...any) error {
	if !j.Keys.Sharded() {
		return j.RDB.ZRem(ctx, j.Keys.Journal().Index(index), ids...).Err()
	}
	by := map[int][]any{}
	for _, id := range ids {
		i := j.Keys.ShardOfTask(fmt.Sprint(id))
		by[i] = append(by[i], id)
	}
	p := j.RDB.Pipeline()
	for i, ids := range by {
		p.ZRem(ctx, j.Keys.Journal().IndexIn(i, index), ids...)
	}
	_, err := p.Exec(ctx)
	return err
}

// Records returns the records of taskIDs, each a string or nil (none).
func (j *Journal) Records(ctx context.Context, taskIDs []string) ([]any, error) {
	keys := make([]string, len(taskIDs))
	for i, id := range taskIDs {
		keys[i] = j.Keys.Journal().Turn(id)
	}
	return mget(ctx, j.RDB, keys)
}

// mget reads keys one GET each in a pipeline, which, unlike MGET,
// also works when the keys live in different cluster slots.
func mget(ctx context.Context, rdb redis.UniversalClient, keys []string) ([]any, error) {
	cmds := make([]*redis.StringCmd, len(keys))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			cmds[i] = p.Get(ctx, k)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]any, len(keys))
	for i, c := range cmds {
		if s, err := c.Result(); err == nil {
			out[i] = s
		} else if !errors.Is(err, redis.Nil) {
			return nil, err
		}
	}
	return out, nil
}
