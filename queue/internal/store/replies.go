package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/redis/go-redis/v9"
)

// Replies keeps the reply streams: per conversation a stream of events
// (each entry the caller's field/value strings, plus "seq"), capped at
// MaxLen (XADD MAXLEN ~) and, with StreamTTL, keeping its events that
// long: its entries older than StreamTTL are trimmed on its writes (XTRIM
// MINID ~) and the stream expires StreamTTL after its last event; per task the counter of its events' seq and the markers of
// its final and accepted events, living TTL.
type Replies struct {
	RDB       redis.UniversalClient
	Keys      Keys
	MaxLen    int64
	TTL       time.Duration
	StreamTTL time.Duration
	// The options' script arguments, boxed once.
	maxLenArg, ttlArg, streamTTLArg any
}

// NewReplies returns the reply streams on rdb.
func NewReplies(rdb redis.UniversalClient, keys Keys, maxLen int64, ttl, streamTTL time.Duration) *Replies {
	return &Replies{RDB: rdb, Keys: keys, MaxLen: maxLen, TTL: ttl, StreamTTL: streamTTL,
		maxLenArg: maxLen, ttlArg: ttl.Milliseconds(), streamTTLArg: streamTTL.Milliseconds()}
}

// MaxLenArg is MaxLen as a command argument, boxed once.
func (r *Replies) MaxLenArg() any { return r.maxLenArg }

// Answered reports whether the final event of taskID's turn was written
// (its marker exists).
func (r *Replies) Answered(ctx context.Context, taskID string) (bool, error) {
	n, err := r.RDB.Exists(ctx, r.Keys.Answered(taskID)).Result()
	if err != nil {
		return false, err
	}
	return n == 1, nil
}

// FinalEntry returns the entry of stream that taskID's answered marker
// points at; found is false when there is no marker, or the stream no
// longer holds the entry.
func (r *Replies) FinalEntry(ctx context.Context, stream, taskID string) (m redis.XMessage, found bool, err error) {
	id, err := r.RDB.Get(ctx, r.Keys.Answered(taskID)).Result()
	if errors.Is(err, redis.Nil) {
		return m, false, nil
	}
	if err != nil {
		return m, false, err
	}
	msgs, err := r.RDB.XRange(ctx, stream, id, id).Result()
	if err != nil {
		return m, false, err
	}
	if len(msgs) == 0 {
		return m, false, nil
	}
	return msgs[0], true, nil
}

// Emit appends an entry of fields (the 7 field/value pairs ReplyEmitMany
// takes: the 5 before "seq", then the 2 after) to stream, with the next seq
// of taskID's counter, in one call of ReplyEmitMany. With marker (a key) it
// writes nothing when the marker exists (written false), and sets it
// otherwise. The call is its own writer (a token of its own): sent again
// by go-redis after a lost reply, it is not written twice, and reports the
// entry it wrote.
func (r *Replies) Emit(ctx context.Context, stream, taskID, marker string, fields ...any) (written bool, id string, seq int64, err error) {
	keys := []string{stream, r.Keys.Seq(taskID), r.Keys.Emitted(taskID)}
	flag := "0"
	if marker != "" {
		keys = append(keys, marker)
		flag = "1"
	}
	args := append([]any{r.maxLenArg, r.ttlArg, r.streamTTLArg, flag, uuid.NewString(), 1, 0}, fields...)
	res, err := ReplyEmitMany.Run(ctx, r.RDB, keys, args...).Slice()
	if err != nil {
		return false, "", 0, err
	}
	if len(res) != 3 {
		return false, "", 0, fmt.Errorf("unexpected script reply %v", res)
	}
	switch ok, _ := res[0].(int64); ok {
	case 1:
	case -1:
		msg, _ := res[1].(string)
		return false, "", 0, errors.New(msg)
	default:
		return false, "", 0, nil
	}
	id, _ = res[1].(string)
	seq, _ = res[2].(int64)
	return true, id, seq, nil
}

// Read returns up to count entries (count <= 0: no limit) of stream that
// come after the entry id after, waiting up to block for the first one
// when there is none yet (block <= 0: do not wait). after is "0" (or "")
// for the whole retained history, "$" for only entries written after Read
// was called, or an entry id; from is after resolved ("$": the stream's
// current last id). A wait that ends with no entry is not an error.
func (r *Replies) Read(ctx context.Context, key, after string, count int64, block time.Duration) (msgs []redis.XMessage, from string, err error) {
	switch after {
	case "", "0":
		after = "0-0"
	case "$":
		last, err := r.RDB.XRevRangeN(ctx, key, "+", "-", 1).Result()
		if err != nil {
			return nil, after, fmt.Errorf("queue: read %s: %w", key, err)
		}
		after = "0-0"
		if len(last) == 1 {
			after = last[0].ID
		}
	}
	args := &redis.XReadArgs{Streams: []string{key, after}, Count: count, Block: -1}
	if count < 0 {
		args.Count = 0
	}
	if block > 0 {
		args.Block = max(block, time.Millisecond) // BLOCK 0 would wait forever
	}
	res, err := r.RDB.XRead(ctx, args).Result()
	if errors.Is(err, redis.Nil) {
		return nil, after, nil
	}
	if err != nil {
		return nil, after, fmt.Errorf("queue: read %s: %w", key, err)
	}
	for _, s := range res {
		msgs = append(msgs, s.Messages...)
	}
	return msgs, after, nil
}

// Head is the front of an event's arguments to ReplyEmitMany, boxed (a
// string made an interface value is allocated): its keys (stream, seq,
// emitted[, marker]), then the written-once flag and the field/value pairs before
// "time" but the type (task_id, otid, run_id, message_id; the type goes
// with each event, see Emission). It is immutable: a turn's events share
// one while these stay the same (a turn's phases, deltas and tools
// alternate: the type is not part of it), so that an event boxes only its
// time and data.
type Head struct {
	nkeys int
	args  []any // keys, then the flag and pairs
}

// Args is the head's arguments: its keys, then the flag and pairs.
func (h *Head) Args() []any { return h.args }

// Keys is the head's keys: stream, seq, emitted[, marker].
func (h *Head) Keys() []any { return h.args[:h.nkeys] }

// Rest is the head's flag and pairs.
func (h *Head) Rest() []any { return h.args[h.nkeys:] }

// Fits reports whether h is the head of an event of taskID, otid, runID
// and messageID with marker, for the conversation h was made for (the
// caller keeps one head per conversation).
func (h *Head) Fits(taskID, otid, runID, messageID, marker string) bool {
	if h == nil || (marker == "") != (h.nkeys == 3) || (marker != "" && h.args[3] != marker) {
		return false
	}
	r := h.Rest()
	return r[2] == taskID && r[4] == otid && r[6] == runID && r[8] == messageID
}

// NewHead returns the head of an event of taskID, otid, runID and
// messageID with marker, for the conversation (integration, chatID). prev,
// when not nil, is an earlier head of that conversation: its boxed values
// serve where they are the same (the stream key always; a turn's next head
// differs in its run id, message id or marker only), so that a head boxes
// what changed.
func (r *Replies) NewHead(integration, chatID, taskID, otid, runID, messageID, marker string, prev *Head) *Head {
	h := &Head{nkeys: 3}
	if marker != "" {
		h.nkeys = 4
	}
	var stream, seq, emitted, task, otidv, run, msg any
	if prev != nil {
		pk, pr := prev.Keys(), prev.Rest()
		stream = pk[0]
		if pr[2] == taskID {
			seq, emitted, task = pk[1], pk[2], pr[2]
		}
		if pr[4] == otid {
			otidv = pr[4]
		}
		if pr[6] == runID {
			run = pr[6]
		}
		if pr[8] == messageID {
			msg = pr[8]
		}
	}
	if stream == nil {
		stream = r.Keys.Replies(integration, chatID)
	}
	if seq == nil {
		seq, emitted, task = r.Keys.Seq(taskID), r.Keys.Emitted(taskID), taskID
	}
	if otidv == nil {
		otidv = otid
	}
	if run == nil {
		run = runID
	}
	if msg == nil {
		msg = messageID
	}
	h.args = make([]any, 0, h.nkeys+9)
	h.args = append(h.args, stream, seq, emitted)
	if marker != "" {
		h.args = append(h.args, marker)
	}
	h.args = append(h.args, boolAny(marker != ""), "task_id", task, "otid", otidv,
		"run_id", run, "message_id", msg)
	return h
}

// Emission is one event of EmitManyOp.
type Emission interface {
	// Encoded is the event's head, and its type, time and data fields
	// (boxed).
	Encoded() (h *Head, typ, at, data any)
	// WriteKey is what makes the event's write idempotent and its seq
	// never go back (see ReplyEmitMany): its writer's token (boxed; nil or
	// "": none), its number n in the writer's events, and floor, the
	// highest seq the writer was told for the turn.
	WriteKey() (token any, n, floor int64)
	// Emitted takes the event's result: ok 1 written (its entry id and
	// seq), 0 not (its marker was there), -1 its own commands failed (msg:
	// Redis's error).
	Emitted(ok int64, id string, seq int64, msg string)
}

// AppendEventArgs appends an event's ARGV of ReplyEmitMany to args: the
// head's flag, the write key (token, n, floor), the type, the head's pairs,
// time and data.
func AppendEventArgs(args []any, h *Head, e Emission) []any {
	_, typ, at, data := e.Encoded()
	token, n, floor := e.WriteKey()
	if token == nil {
		token = ""
	}
	r := h.Rest()
	args = append(args, r[0], token, n, floor, "type", typ)
	args = append(args, r[1:]...)
	return append(args, "time", at, "data", data)
}

// EmitManyOp writes evs in one call of ReplyEmitMany. The command's
// arguments are one slice of their exact size, taken from args (nil: made
// when the op runs). Its error is the call's (nothing was written, or what
// was is not known); each event gets its own result (Emitted).
func EmitManyOp[E Emission](r *Replies, evs []E, args *ArgArena) Op {
	return func(ctx context.Context, p redis.Pipeliner, sha bool) func() error {
		var c *redis.Cmd
		if sha {
			c = emitManyCmd(ctx, r, evs, args)
			_ = p.Process(ctx, c) // the error is c's, read below
		} else {
			keys, args := EmitManyArgs(r, evs)
			c = ReplyEmitMany.Eval(ctx, p, keys, args...)
		}
		return func() error { return readEmitMany(c, evs) }
	}
}

// emitManyCmd is EVALSHA of ReplyEmitMany for evs.
func emitManyCmd[E Emission](ctx context.Context, r *Replies, evs []E, arena *ArgArena) *redis.Cmd {
	nk, na := 0, 0
	for _, e := range evs {
		h, _, _, _ := e.Encoded()
		nk += h.nkeys
		na += len(h.args) - h.nkeys + 9
	}
	args := arena.Take(3 + nk + 3 + na)
	args = append(args, "evalsha", ReplyEmitMany.Hash(), nk)
	for _, e := range evs {
		h, _, _, _ := e.Encoded()
		args = append(args, h.Keys()...)
	}
	args = append(args, r.maxLenArg, r.ttlArg, r.streamTTLArg)
	for _, e := range evs {
		h, _, _, _ := e.Encoded()
		args = AppendEventArgs(args, h, e)
	}
	c := redis.NewCmd(ctx, args...)
	c.SetFirstKeyPos(3)
	return c
}

// EmitManyArgs are ReplyEmitMany's keys and args for evs (for EVAL).
func EmitManyArgs[E Emission](r *Replies, evs []E) ([]string, []any) {
	var keys []string
	args := []any{r.maxLenArg, r.ttlArg, r.streamTTLArg}
	for _, e := range evs {
		h, _, _, _ := e.Encoded()
		for _, k := range h.Keys() {
			keys = append(keys, k.(string))
		}
		args = AppendEventArgs(args, h, e)
	}
	return keys, args
}

// readEmitMany reads ReplyEmitMany's reply into evs. Its error is the
// call's (nothing was written, or what was is not known); an event whose
// own commands failed gets -1 and Redis's error.
func readEmitMany[E Emission](c *redis.Cmd, evs []E) error {
	res, err := c.Slice()
	if err != nil {
		return fmt.Errorf("queue: emit %d events: %w", len(evs), err)
	}
	if len(res) != 3*len(evs) {
		return fmt.Errorf("queue: emit %d events: unexpected script reply of %d values", len(evs), len(res))
	}
	for i, e := range evs {
		ok, _ := res[3*i].(int64)
		var (
			id  string
			seq int64
			msg string
		)
		switch ok {
		case 1:
			id, _ = res[3*i+1].(string)
			seq, _ = res[3*i+2].(int64)
		case -1:
			msg, _ = res[3*i+1].(string)
		}
		e.Emitted(ok, id, seq, msg)
	}
	return nil
}

// ArgArena hands out the arguments of a round trip's commands from one
// array, reused from one round trip to the next (by the writer's goroutine
// alone: reset it once the round trip's replies are read, when go-redis is
// done with the commands). A nil arena makes new slices.
type ArgArena struct {
	buf  []any
	used int
	want int // what the last round trip needed
}

// argArenaKeep bounds the array an arena keeps (a round trip of 1,024
// heartbeats needs about 17,000 arguments).
const argArenaKeep = 1 << 15

// Take returns an empty slice with room for n arguments.
func (a *ArgArena) Take(n int) []any {
	if a == nil {
		return make([]any, 0, n)
	}
	a.want += n
	if a.used+n > len(a.buf) {
		return make([]any, 0, n)
	}
	s := a.buf[a.used : a.used : a.used+n]
	a.used += n
	return s
}

// Reset lets go of the arguments handed out, and sizes the array for what
// the last round trip needed.
func (a *ArgArena) Reset() {
	clear(a.buf[:a.used])
	a.used = 0
	if a.want > len(a.buf) && a.want <= argArenaKeep {
		a.buf = make([]any, a.want)
	}
	a.want = 0
}
