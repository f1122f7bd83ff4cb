package ordering

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Defaults of Config.
const (
	DefaultPrefix        = "lettaq:ord:"
	DefaultLease         = time.Minute
	DefaultMergedTTL     = 24 * time.Hour
	DefaultDeadHeadGrace = 5 * time.Second
	DefaultMaxSkips      = 16
)

// Config configures a Sequencer. The zero value is usable.
type Config struct {
	// Prefix of every key, default DefaultPrefix. It must not contain '{'
	// or '}': the keys' hash tag is the conversation key.
	Prefix string
	// Lease of the lock, default DefaultLease: the lock of a worker that
	// dies holding a key lives at most this long past its last renewal
	// (its task keeps the head, and takes the lock over when Asynq
	// recovers it). The lease is renewed every RenewEvery while the turn
	// runs; Lost fires when Redis stays unreachable this long.
	Lease time.Duration
	// RenewEvery, default Lease/3.
	RenewEvery time.Duration
	// MergedTTL: how long the merged markers of TakeFollowers live, default
	// DefaultMergedTTL (keep it ≥ the tasks' retention and retry horizon).
	MergedTTL time.Duration
	// DoneTTL: how long a finished task is remembered, so that a duplicate
	// delivery or a late Join does not put it back in the line (Acquire
	// returns ErrDone), default DefaultMergedTTL.
	DoneTTL time.Duration
	// DeadHeadGrace: a head that joined less than this long ago is never
	// judged dead (a client may Join just before its Enqueue reaches
	// Redis), default DefaultDeadHeadGrace. Negative: no grace. The join
	// time is the joining client's clock: one more than a grace ahead of
	// the judging worker's clock is taken for clock skew and gets no grace.
	DeadHeadGrace time.Duration
	// MaxSkips bounds how many dead heads one Acquire removes, default
	// DefaultMaxSkips.
	MaxSkips int
	// NoAutoJoin: Acquire of a task not in the line returns ErrNotJoined
	// instead of joining it at the tail.
	NoAutoJoin bool
	// Now is the clock for join times, default time.Now.
	Now func() time.Time
}

// Sequencer keeps one FIFO line and one lease-backed lock per conversation
// key in Redis. It is safe for concurrent use, and any number of processes
// may share the same keys.
type Sequencer struct {
	rdb    redis.UniversalClient
	cfg    Config
	prefix string
	renew  renewer // renews the leases held through this Sequencer
	joins  joiner  // sends concurrent Joins together
	// Script arguments every call passes, boxed once.
	leaseMsArg, doneTTLArg, autoJoinArg any
}

// AliveFunc reports whether a task can still run (see InspectorAlive). A
// task that is not alive and heads a line with a free lock is removed.
type AliveFunc func(ctx context.Context, taskID string) (bool, error)

// New returns a Sequencer on rdb (not owned: the caller closes it).
func New(rdb redis.UniversalClient, cfg Config) (*Sequencer, error) {
	if rdb == nil {
		return nil, errors.New("ordering: nil Redis client")
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultPrefix
	}
	if strings.ContainsAny(cfg.Prefix, "{}") {
		return nil, fmt.Errorf("ordering: Prefix %q must not contain '{' or '}'", cfg.Prefix)
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.Lease < 3*time.Millisecond {
		return nil, fmt.Errorf("ordering: Lease %v is too short", cfg.Lease)
	}
	if cfg.RenewEvery <= 0 {
		cfg.RenewEvery = cfg.Lease / 3
	}
	if cfg.RenewEvery >= cfg.Lease {
		return nil, fmt.Errorf("ordering: RenewEvery %v must be shorter than Lease %v", cfg.RenewEvery, cfg.Lease)
	}
	if cfg.MergedTTL <= 0 {
		cfg.MergedTTL = DefaultMergedTTL
	}
	if cfg.DoneTTL <= 0 {
		cfg.DoneTTL = DefaultMergedTTL
	}
	if cfg.DeadHeadGrace == 0 {
		cfg.DeadHeadGrace = DefaultDeadHeadGrace
	}
	if cfg.MaxSkips <= 0 {
		cfg.MaxSkips = DefaultMaxSkips
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sequencer{rdb: rdb, cfg: cfg, prefix: cfg.Prefix,
		leaseMsArg: strconv.FormatInt(cfg.Lease.Milliseconds(), 10), doneTTLArg: cfg.DoneTTL.Milliseconds(), autoJoinArg: "1"}
	if cfg.NoAutoJoin {
		s.autoJoinArg = "0"
	}
	s.renew.init(s)
	s.joins.rdb = rdb
	return s, nil
}

// Config returns the configuration in use (defaults filled in).
func (s *Sequencer) Config() Config { return s.cfg }

func checkKey(key string) error {
	if !validKey(key) {
		return fmt.Errorf("%w: %q", ErrInvalidKey, key)
	}
	return nil
}

// nowMs is the time in ms as a script argument (go-redis sends it in
// decimal, as FormatInt would, without a string to make first).
func (s *Sequencer) nowMs() any { return s.cfg.Now().UnixMilli() }

// Join puts taskID at the tail of key's line, at enqueue time, and returns
// its 0-based position (0: it runs next). Joining again (a duplicate
// enqueue, a retried client) keeps the original place and returns the
// current position. A task whose turn already finished (Release with done,
// within Config.DoneTTL) or that was merged into another turn
// (TakeFollowers) does not join again: Join returns -1. Joins
// called while another is in flight on the same Sequencer wait for it and
// then go together, in one round trip (see joiner).
func (s *Sequencer) Join(ctx context.Context, key, taskID string) (int, error) {
	pos, _, err := s.JoinAdded(ctx, key, taskID)
	return pos, err
}

// JoinAdded is Join, and also reports whether this call put taskID in the
// line (false when it was there already, or is done). A caller that undoes
// its join when its enqueue fails (Remove) must do so only when added is
// true: a duplicate's join changed nothing, and its Remove would take the
// original task's place.
func (s *Sequencer) JoinAdded(ctx context.Context, key, taskID string) (pos int, added bool, err error) {
	if err := checkKey(key); err != nil {
		return 0, false, err
	}
	res, err := s.joins.join(ctx, append(joinLua.Args(3, 2), s.lineKey(key), s.doneKey(key, taskID), s.mergedKey(key, taskID),
		taskID, s.nowMs())).Int64Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return 0, false, fmt.Errorf("ordering: join %s on %q: %w", taskID, key, err)
	}
	return int(res[0]), res[1] == 1, nil
}

// Acquire lets taskID run its turn: it succeeds only when taskID heads
// key's line and the lock is free, or when the lock is held by an earlier
// attempt of taskID itself, wherever taskID is in the line (a recovered,
// retried or taken-over attempt takes the lock over, also behind a task
// that joined in front of it meanwhile; the earlier attempt's lease then
// reports Lost). The lease is renewed in the background until Release.
//
// Otherwise it returns a *NotYourTurnError. When the head is not running
// (lock free) and alive (may be nil) says it will never run, the head is
// removed and the check repeated, up to Config.MaxSkips times. An error of
// alive counts as "alive".
//
// A task that merged into an earlier turn gets a *MergedError, one whose
// turn already finished gets ErrDone (a duplicate delivery). A task that is
// not in the line joins it at the tail (unless Config.NoAutoJoin).
// holder names the worker, for operators.
func (s *Sequencer) Acquire(ctx context.Context, key, taskID, holder string, alive AliveFunc) (*Lease, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	return s.acquire(ctx, key, taskID, holder, uuid.NewString(), alive, nil)
}

// Acquiring is an Acquire queued in a pipeline (AcquireIn): Lease reads
// its reply once the pipeline ran.
type Acquiring struct {
	s                          *Sequencer
	key, taskID, holder, token string
	cmd                        *redis.Cmd
	first                      bool
}

// AcquireIn queues Acquire's first try in p, a pipeline of the Sequencer's
// own client (see Client), so that it shares a round trip with the
// caller's reads: on a single Redis those queued after it in p run after
// it. Call Lease on the result once p ran.
func (s *Sequencer) AcquireIn(ctx context.Context, p redis.Pipeliner, key, taskID, holder string) (*Acquiring, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	a := &Acquiring{s: s, key: key, taskID: taskID, holder: holder, token: uuid.NewString()}
	a.cmd = acquireLua.Cmd(ctx, s.acquireArgs(key, taskID, holder, a.token), true)
	_ = p.Process(ctx, a.cmd) // the error is a.cmd's, read by Lease
	return a, nil
}

// Lease is Acquire's result for the try that AcquireIn queued: that try's
// reply, and any further try Acquire would make (its head's liveness, a
// script Redis did not have yet, an error of the round trip: a try again
// with the same token, which takes nothing twice).
func (a *Acquiring) Lease(ctx context.Context, alive AliveFunc) (*Lease, error) {
	res, err := a.cmd.Slice()
	if err != nil {
		res = nil
	}
	a.first = str(res, 0) == "ok"
	return a.s.acquire(ctx, a.key, a.taskID, a.holder, a.token, alive, res)
}

// First reports whether Lease's lease came from the try AcquireIn queued:
// then the commands queued after it in the pipeline ran with the lock held
// (on a single Redis).
func (a *Acquiring) First() bool { return a.first }

// Client is the Redis client the Sequencer runs on (for AcquireIn).
func (s *Sequencer) Client() redis.UniversalClient { return s.rdb }

// acquireArgs is the command of acquireLua for taskID's try.
func (s *Sequencer) acquireArgs(key, taskID, holder, token string) []any {
	return append(acquireLua.Args(4, 6), s.lineKey(key), s.lockKey(key), s.mergedKey(key, taskID), s.doneKey(key, taskID),
		taskID, token, holder, s.leaseMsArg, s.nowMs(), s.autoJoinArg)
}

// acquire is Acquire with its token; first, when not nil, is the reply of
// its first try, made already (AcquireIn).
func (s *Sequencer) acquire(ctx context.Context, key, taskID, holder, token string, alive AliveFunc, first []any) (*Lease, error) {
	removed := 0 // dead heads removed
	for skips := 0; ; skips++ {
		res := first
		first = nil
		if res == nil {
			var err error
			if res, err = acquireLua.Call(ctx, s.rdb, s.acquireArgs(key, taskID, holder, token)).Slice(); err != nil {
				return nil, fmt.Errorf("ordering: acquire %s on %q: %w", taskID, key, err)
			}
		}
		switch str(res, 0) {
		case "ok":
			return s.newLease(key, taskID, holder, token), nil
		case "merged":
			return nil, &MergedError{Key: key, TaskID: taskID, Into: str(res, 1)}
		case "done":
			return nil, fmt.Errorf("%w: %s on %q", ErrDone, taskID, key)
		case "notjoined":
			return nil, fmt.Errorf("%w: %s on %q", ErrNotJoined, taskID, key)
		case "wait":
		default:
			return nil, fmt.Errorf("ordering: acquire %s on %q: unexpected reply %v", taskID, key, res)
		}
		pos, _ := res[1].(int64)
		head, held := str(res, 2), str(res, 3)
		nyt := &NotYourTurnError{Key: key, Position: int(pos), Head: head, HeadHeld: held != "", RemovedDead: removed}
		if held != "" || head == taskID || alive == nil || skips >= s.cfg.MaxSkips {
			return nil, nyt
		}
		if s.inGrace(str(res, 4)) {
			return nil, nyt
		}
		ok, err := alive(ctx, head)
		if err != nil || ok {
			return nil, nyt
		}
		n, err := removeDeadLua.Run(ctx, s.rdb, []string{s.lineKey(key), s.lockKey(key)}, head).Int()
		if err != nil {
			return nil, fmt.Errorf("ordering: remove dead head %s on %q: %w", head, key, err)
		}
		removed += n
	}
}

// inGrace reports whether a head whose line score is score joined too
// recently to be judged dead (Config.DeadHeadGrace). The join time is the
// joining client's clock: one more than a grace ahead of this clock is
// taken for a client's clock running fast, not for a join to come, and
// gets no grace (else a fast clock would keep a dead head, and every join
// behind it, which takes its score + 1, from being judged for as long as
// the clock is ahead). So a head waits at most two graces of this clock.
func (s *Sequencer) inGrace(score string) bool {
	g := s.cfg.DeadHeadGrace
	if g <= 0 {
		return false
	}
	sc, _ := strconv.ParseFloat(score, 64)
	age := s.cfg.Now().Sub(time.UnixMilli(int64(sc / 1000)))
	return age < g && age >= -g
}

func str(res []any, i int) string {
	if i >= len(res) {
		return ""
	}
	switch v := res[i].(type) {
	case string:
		return v
	case int64:
		return strconv.FormatInt(v, 10)
	}
	return ""
}

// Remove takes taskID out of key's line (a task deleted or cancelled by an
// operator, an enqueue that failed after Join). A turn of taskID that is
// running keeps the lock until it releases it or its lease ends.
func (s *Sequencer) Remove(ctx context.Context, key, taskID string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if err := s.rdb.ZRem(ctx, s.lineKey(key), taskID).Err(); err != nil {
		return fmt.Errorf("ordering: remove %s on %q: %w", taskID, key, err)
	}
	return nil
}

// Leave is Remove that also returns the task to wake: the new head when
// taskID headed the line and nobody holds its lock, "" otherwise (the head
// did not change, or the holder's Release returns the head). The
// removal and the look at the line are one script: a turn ahead that ends
// meanwhile either finds taskID still at the head (and its Release returns
// taskID, not the turn behind it) or has left the line already, and then
// Leave returns the new head.
func (s *Sequencer) Leave(ctx context.Context, key, taskID string) (next string, err error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	next, err = leaveLua.Run(ctx, s.rdb, []string{s.lineKey(key), s.lockKey(key)}, taskID).Text()
	if err != nil {
		return "", fmt.Errorf("ordering: leave %s on %q: %w", taskID, key, err)
	}
	return next, nil
}

// Position returns taskID's 0-based place in key's line, -1 when it is not
// in the line.
func (s *Sequencer) Position(ctx context.Context, key, taskID string) (int, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	n, err := s.rdb.ZRank(ctx, s.lineKey(key), taskID).Result()
	if errors.Is(err, redis.Nil) {
		return -1, nil
	}
	if err != nil {
		return 0, fmt.Errorf("ordering: position %s on %q: %w", taskID, key, err)
	}
	return int(n), nil
}

// Head returns the task that runs next (or is running) on key, "" when the
// line is empty.
func (s *Sequencer) Head(ctx context.Context, key string) (string, error) {
	if err := checkKey(key); err != nil {
		return "", err
	}
	h, err := s.rdb.ZRange(ctx, s.lineKey(key), 0, 0).Result()
	if err != nil {
		return "", fmt.Errorf("ordering: head of %q: %w", key, err)
	}
	if len(h) == 0 {
		return "", nil
	}
	return h[0], nil
}

// Members returns the tasks of key's line, the head (running or next)
// first.
func (s *Sequencer) Members(ctx context.Context, key string) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	m, err := s.rdb.ZRange(ctx, s.lineKey(key), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("ordering: members of %q: %w", key, err)
	}
	return m, nil
}

// Len returns how many tasks are in key's line (the running one included).
func (s *Sequencer) Len(ctx context.Context, key string) (int, error) {
	if err := checkKey(key); err != nil {
		return 0, err
	}
	n, err := s.rdb.ZCard(ctx, s.lineKey(key)).Result()
	if err != nil {
		return 0, fmt.Errorf("ordering: len of %q: %w", key, err)
	}
	return int(n), nil
}

// Holder returns the task holding key's lock and the holder it gave to
// Acquire, "" when the lock is free.
func (s *Sequencer) Holder(ctx context.Context, key string) (taskID, holder string, err error) {
	if err := checkKey(key); err != nil {
		return "", "", err
	}
	v, err := s.rdb.HMGet(ctx, s.lockKey(key), "task", "holder").Result()
	if err != nil {
		return "", "", fmt.Errorf("ordering: holder of %q: %w", key, err)
	}
	taskID, _ = v[0].(string)
	holder, _ = v[1].(string)
	return taskID, holder, nil
}

// TakeFollowers removes from key's line up to max tasks queued right behind
// headTaskID (messages that arrived while the key was busy) and marks each
// as merged into headTaskID, so that the head's turn sends their texts with
// its own, as one user message. It returns them in line order. headTaskID
// must be the head (ErrNotHead otherwise); call it while holding its lease.
// max ≤ 0 takes nothing. A call sent again by the client after its reply
// was lost returns what it took (each call carries a token of its own).
func (s *Sequencer) TakeFollowers(ctx context.Context, key, headTaskID string, max int) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	group := s.groupKey(key, headTaskID)
	res, err := takeLua.Run(ctx, s.rdb, []string{s.lineKey(key), group, group + ":take"},
		headTaskID, max, s.cfg.MergedTTL.Milliseconds(), s.mergedPrefix(key), uuid.NewString()).Slice()
	if err != nil {
		return nil, fmt.Errorf("ordering: take followers of %s on %q: %w", headTaskID, key, err)
	}
	if str(res, 0) == "nothead" {
		return nil, fmt.Errorf("%w: %s on %q (head is %q)", ErrNotHead, headTaskID, key, str(res, 1))
	}
	out := make([]string, 0, len(res)-1)
	for i := 1; i < len(res); i++ {
		out = append(out, str(res, i))
	}
	return out, nil
}

// MergedFollowers returns every task TakeFollowers has merged into
// headTaskID so far, in order: a retried attempt of the head rebuilds the
// same merged message from it.
func (s *Sequencer) MergedFollowers(ctx context.Context, key, headTaskID string) ([]string, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	v, err := s.rdb.LRange(ctx, s.groupKey(key, headTaskID), 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("ordering: merged followers of %s on %q: %w", headTaskID, key, err)
	}
	return v, nil
}

// MergedInto reports whether taskID was merged into another turn, and
// which. Acquire reports the same as a *MergedError.
func (s *Sequencer) MergedInto(ctx context.Context, key, taskID string) (headTaskID string, ok bool, err error) {
	if err := checkKey(key); err != nil {
		return "", false, err
	}
	v, err := s.rdb.Get(ctx, s.mergedKey(key, taskID)).Result()
	if errors.Is(err, redis.Nil) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("ordering: merged %s on %q: %w", taskID, key, err)
	}
	return v, true, nil
}
